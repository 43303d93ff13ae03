//! The audit helper (`lab/audit-count` through [`e2e::Audit`]) counts exactly the writes a
//! test user did between two marks: no read, no other user's write, the refused one too.

use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::{AuditFilter, Forbidden, Lab, metallb_resource};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
};
use serde_json::json;

#[tokio::test]
async fn audit_counts_exactly_the_writes_of_a_test_user_between_two_marks() -> Result<()> {
    let lab = Lab::connect().await?;
    let ns = lab.test_namespace("audit").await?;
    let n = ns.name.as_str();
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some(n.into()),
        ..Default::default()
    };

    // A user of its own (a ServiceAccount of this namespace) allowed to write ConfigMaps
    // here, set up by the admin.
    Api::<ServiceAccount>::namespaced(lab.client.clone(), n)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: meta("writer"),
                ..Default::default()
            },
        )
        .await?;
    Api::<Role>::namespaced(lab.client.clone(), n)
        .create(
            &PostParams::default(),
            &Role {
                metadata: meta("configmaps"),
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec!["configmaps".into()]),
                    verbs: [
                        "get", "list", "watch", "create", "update", "patch", "delete",
                    ]
                    .map(String::from)
                    .to_vec(),
                    ..Default::default()
                }]),
            },
        )
        .await?;
    Api::<RoleBinding>::namespaced(lab.client.clone(), n)
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: meta("configmaps"),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: "configmaps".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "writer".into(),
                    namespace: Some(n.into()),
                    ..Default::default()
                }]),
            },
        )
        .await?;
    let user = format!("system:serviceaccount:{n}:writer");
    lab.wait_allowed(&user, "delete", "configmaps", Some(n))
        .await?;
    let writer = lab.client_as(n, "writer").await?;
    let audit = lab.audit();

    let mark = audit.mark().await?;
    let cms = Api::<ConfigMap>::namespaced(writer.clone(), n);
    let mut cm = ConfigMap {
        metadata: meta("counted"),
        data: Some([("k".to_string(), "1".to_string())].into()),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await?; // create
    cms.patch(
        "counted",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await?; // patch
    cm = cms.get("counted").await?; // reads: not counted
    cms.list(&ListParams::default()).await?;
    cm.data = Some([("k".to_string(), "3".to_string())].into());
    cms.replace("counted", &PostParams::default(), &cm).await?; // update
    cms.delete("counted", &DeleteParams::default()).await?; // delete
    let pool = DynamicObject::new("refused", &metallb_resource("IPAddressPool"))
        .data(json!({"spec": {"addresses": ["198.51.100.250/32"]}}));
    lab.metallb(&writer, n, "IPAddressPool")
        .create(&PostParams::default(), &pool)
        .await
        .forbidden()?; // a refused create: counted as failed
    // The admin writes in between: another user, not counted.
    Api::<ConfigMap>::namespaced(lab.client.clone(), n)
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: meta("admin-write"),
                ..Default::default()
            },
        )
        .await?;

    let all = audit
        .expect_total(
            mark,
            &AuditFilter::user(&user),
            5,
            Duration::from_millis(1500),
        )
        .await?;
    let want = |rows: &[(&str, &str, u64)]| -> Vec<(String, String, u64)> {
        rows.iter()
            .map(|(v, r, c)| (v.to_string(), r.to_string(), *c))
            .collect()
    };
    ensure!(
        all.rows()
            == want(&[
                ("create", "configmaps", 1),
                ("create", "ipaddresspools.metallb.io", 1),
                ("delete", "configmaps", 1),
                ("patch", "configmaps", 1),
                ("update", "configmaps", 1),
            ]),
        "audit-count since the mark, user {user}: {:?}",
        all.rows()
    );
    ensure!(
        all.writes.iter().all(|w| w.user == user),
        "other users counted: {:?}",
        all.writes
    );
    let failed = audit
        .count(Some(mark), &AuditFilter::user(&user).status("failed"))
        .await?;
    ensure!(
        failed.rows() == want(&[("create", "ipaddresspools.metallb.io", 1)]),
        "failed writes of {user}: {:?}",
        failed.rows()
    );
    let ok = audit
        .count(Some(mark), &AuditFilter::user(&user).status("ok"))
        .await?;
    ensure!(
        ok.total == 4,
        "successful writes of {user}: {:?}",
        ok.rows()
    );
    let by_resource = audit
        .count(
            Some(mark),
            &AuditFilter {
                resources: vec!["configmaps".into()],
                namespace: Some(n.into()),
                ..AuditFilter::user(&user)
            },
        )
        .await?;
    ensure!(
        by_resource.total == 4,
        "writes of {user} to configmaps in {n}: {:?}",
        by_resource.rows()
    );
    let admin = audit
        .count(
            Some(mark),
            &AuditFilter {
                namespace: Some(n.into()),
                name: Some("admin-write".into()),
                ..AuditFilter::user("admin")
            },
        )
        .await?;
    ensure!(
        admin.total == 1,
        "the admin's write in between: {:?}",
        admin.rows()
    );

    // The second mark: nothing of this user after it, and reads do not count.
    let mark2 = audit.mark().await?;
    ensure!(mark2 > mark, "mark did not advance: {mark} then {mark2}");
    Api::<ConfigMap>::namespaced(writer.clone(), n)
        .list(&ListParams::default())
        .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = audit.count(Some(mark2), &AuditFilter::user(&user)).await?;
    ensure!(
        after.total == 0,
        "writes of {user} after the second mark: {:?}",
        after.rows()
    );

    ns.delete().await?;
    Ok(())
}
