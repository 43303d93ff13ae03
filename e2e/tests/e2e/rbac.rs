//! The RBAC of deploy/rbac/, exercised with TokenRequest tokens of the `speaker` and
//! `controller` ServiceAccounts: what each may write succeeds, what it may not is refused
//! with 403 by RBAC.

use std::fmt::Debug;

use anyhow::{Result, bail};
use e2e::{
    EndpointSpec, Forbidden, Lab, LbService, METALLB_NAMESPACE, metallb_resource, unique_suffix,
};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, Node, ObjectReference, Secret, Service,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
    Preconditions,
};
use serde_json::json;

/// The controller's Lease in metallb-system (`controller::leader::LEASE_NAME`); the RBAC
/// limits its get and update to this name.
const CONTROLLER_LEASE: &str = "metallb-rs-controller";

fn lease(name: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A list of checks, reported together: each line says what was tried, what was expected
/// and what happened.
struct Checks {
    who: String,
    lines: Vec<String>,
    failed: usize,
}

impl Checks {
    fn new(who: &str) -> Checks {
        Checks {
            who: who.into(),
            lines: Vec::new(),
            failed: 0,
        }
    }

    fn allowed<T>(&mut self, what: &str, r: kube::Result<T>) -> Option<T> {
        match r {
            Ok(v) => {
                self.lines.push(format!("ok      allowed: {what}"));
                Some(v)
            }
            Err(e) => {
                self.failed += 1;
                self.lines
                    .push(format!("FAILED  should be allowed: {what}: {e}"));
                None
            }
        }
    }

    /// Allowed by RBAC: succeeded, or answered 409 Conflict (authorization comes before
    /// storage, so a conflict means RBAC let the write through and a concurrent writer,
    /// such as a running controller renewing its Lease, won the race).
    fn allowed_or_conflict<T>(&mut self, what: &str, r: kube::Result<T>) -> Option<T> {
        match r {
            Err(kube::Error::Api(s)) if s.code == 409 => {
                self.lines.push(format!(
                    "ok      allowed (409: a concurrent write won): {what}"
                ));
                None
            }
            r => self.allowed(what, r),
        }
    }

    fn refused<T: Debug>(&mut self, what: &str, r: kube::Result<T>) {
        let user = format!("User \"{}\" cannot", self.who);
        match r.forbidden() {
            Ok(msg) if msg.contains(&user) => {
                self.lines.push(format!("ok      refused: {what}"));
            }
            Ok(msg) => {
                self.failed += 1;
                self.lines.push(format!(
                    "FAILED  refused, but not by RBAC for {}: {what}: {msg}",
                    self.who
                ));
            }
            Err(e) => {
                self.failed += 1;
                self.lines
                    .push(format!("FAILED  should be refused (403): {what}: {e:#}"));
            }
        }
    }

    fn finish(self) -> Result<()> {
        let report = format!("RBAC of {}:\n  {}", self.who, self.lines.join("\n  "));
        println!("{report}");
        if self.failed > 0 {
            bail!(
                "{} of {} RBAC checks failed\n{report}",
                self.failed,
                self.lines.len()
            );
        }
        Ok(())
    }
}

/// What the metrics server does for a scrape (kube-metrics' `KubeAuthorizer`): a
/// TokenReview of the scraper's token, then a SubjectAccessReview of its user for `get` on
/// `/metrics`. Both are answered (201) whatever the answer, and stored nowhere.
async fn metrics_reviews(c: &mut Checks, client: &Client) {
    let token = TokenReview {
        spec: TokenReviewSpec {
            token: "not-a-token".into(),
            audiences: None,
        },
        ..Default::default()
    };
    c.allowed(
        "create a TokenReview (metrics authentication)",
        Api::<TokenReview>::all(client.clone())
            .create(&PostParams::default(), &token)
            .await,
    );
    let access = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("system:anonymous".into()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some("/metrics".into()),
                verb: Some("get".into()),
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    c.allowed(
        "create a SubjectAccessReview (metrics authorisation)",
        Api::<SubjectAccessReview>::all(client.clone())
            .create(&PostParams::default(), &access)
            .await,
    );
}

fn dynamic(
    lab: &Lab,
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    data: serde_json::Value,
) -> (Api<DynamicObject>, DynamicObject) {
    let obj = DynamicObject::new(name, &metallb_resource(kind)).data(data);
    (lab.metallb(client, ns, kind), obj)
}

fn core_event(ns: &str, svc: &Service, reason: &str) -> Event {
    Event {
        metadata: ObjectMeta {
            generate_name: Some("e2e-".into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Service".into()),
            name: svc.metadata.name.clone(),
            namespace: Some(ns.into()),
            uid: svc.metadata.uid.clone(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some("e2e RBAC check".into()),
        type_: Some("Normal".into()),
        ..Default::default()
    }
}

fn events_v1(
    ns: &str,
    svc: &Service,
    reason: &str,
    controller: &str,
) -> Result<k8s_openapi::api::events::v1::Event> {
    Ok(serde_json::from_value(json!({
        "metadata": {"generateName": "e2e-", "namespace": ns},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": controller,
        "reportingInstance": format!("{controller}-e2e"),
        "action": "Check",
        "reason": reason,
        "type": "Normal",
        "note": "e2e RBAC check",
        "regarding": {
            "apiVersion": "v1", "kind": "Service", "namespace": ns,
            "name": svc.metadata.name, "uid": svc.metadata.uid,
        },
    }))?)
}

#[tokio::test]
async fn speaker_token_may_write_only_its_status_objects_in_its_namespace() -> Result<()> {
    let lab = Lab::connect().await?;
    lab.apply_deploy_rbac().await?;
    let other = lab.test_namespace("rbac-speaker").await?;
    let (svc, _) = lab
        .create_lb_service(
            &other.name,
            &LbService::new("web").endpoints(vec![EndpointSpec::ready("node-1")]),
        )
        .await?;
    let speaker = lab.client_as(METALLB_NAMESPACE, "speaker").await?;
    let ms = METALLB_NAMESPACE;
    let suffix = unique_suffix();
    let mut c = Checks::new("system:serviceaccount:metallb-system:speaker");

    // Reads it needs.
    c.allowed(
        "list Services in all namespaces",
        Api::<Service>::all(speaker.clone())
            .list(&ListParams::default())
            .await,
    );
    c.allowed(
        "list EndpointSlices in all namespaces",
        Api::<EndpointSlice>::all(speaker.clone())
            .list(&ListParams::default())
            .await,
    );
    c.allowed(
        "list Nodes",
        Api::<Node>::all(speaker.clone())
            .list(&ListParams::default())
            .await,
    );
    c.allowed(
        "list Namespaces",
        Api::<Namespace>::all(speaker.clone())
            .list(&ListParams::default())
            .await,
    );
    c.allowed(
        "list Secrets in metallb-system (BGP passwords)",
        Api::<Secret>::namespaced(speaker.clone(), ms)
            .list(&ListParams::default())
            .await,
    );
    for kind in [
        "IPAddressPool",
        "BGPPeer",
        "BGPAdvertisement",
        "L2Advertisement",
        "BFDProfile",
        "Community",
    ] {
        c.allowed(
            &format!("list {kind} objects in metallb-system"),
            lab.metallb(&speaker, ms, kind)
                .list(&ListParams::default())
                .await,
        );
    }

    // Writes it needs, in metallb-system: a ServiceBGPStatus (create, status, delete), a
    // BGPSessionStatus, a ServiceL2Status, its ConfigurationState.
    let (api, bgp) = dynamic(&lab, &speaker, ms, "ServiceBGPStatus", "", json!({}));
    let mut bgp = bgp;
    bgp.metadata.name = None;
    bgp.metadata.generate_name = Some("bgp-".into());
    if let Some(created) = c.allowed(
        "create a ServiceBGPStatus (generateName bgp-) in metallb-system",
        api.create(&PostParams::default(), &bgp).await,
    ) {
        let name = created.metadata.name.clone().unwrap_or_default();
        c.allowed(
            "write a ServiceBGPStatus's status in metallb-system",
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "node": "node-1", "serviceName": "web", "serviceNamespace": other.name,
                }})),
            )
            .await,
        );
        c.allowed(
            "delete a ServiceBGPStatus in metallb-system",
            api.delete(&name, &DeleteParams::default()).await,
        );
    }
    for kind in ["ServiceBGPStatus", "BGPSessionStatus", "ServiceL2Status"] {
        let name = format!("e2e-{}-{suffix}", kind.to_lowercase());
        let (api, obj) = dynamic(&lab, &speaker, ms, kind, &name, json!({}));
        if c.allowed(
            &format!("create a {kind} in metallb-system"),
            api.create(&PostParams::default(), &obj).await,
        )
        .is_some()
        {
            c.allowed(
                &format!("delete a {kind} in metallb-system"),
                api.delete(&name, &DeleteParams::default()).await,
            );
        }
    }
    let cs_name = format!("speaker-e2e-{suffix}");
    let (cs_api, cs) = dynamic(
        &lab,
        &speaker,
        ms,
        "ConfigurationState",
        &cs_name,
        json!({}),
    );
    if c.allowed(
        "create its ConfigurationState in metallb-system",
        cs_api.create(&PostParams::default(), &cs).await,
    )
    .is_some()
    {
        c.allowed(
            "write its ConfigurationState's status",
            cs_api
                .patch_status(
                    &cs_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"result": "Valid"}})),
                )
                .await,
        );
        c.refused(
            "delete a ConfigurationState (the garbage collector does)",
            cs_api.delete(&cs_name, &DeleteParams::default()).await,
        );
    }
    c.refused(
        "create an Event (core; its Recorder writes events.k8s.io)",
        Api::<Event>::namespaced(speaker.clone(), &other.name)
            .create(
                &PostParams::default(),
                &core_event(&other.name, &svc, "nodeAssigned"),
            )
            .await,
    );
    c.allowed(
        "create an Event (events.k8s.io) about a Service",
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(speaker.clone(), &other.name)
            .create(
                &PostParams::default(),
                &events_v1(&other.name, &svc, "nodeAssigned", "metallb.io/speaker")?,
            )
            .await,
    );

    metrics_reviews(&mut c, &speaker).await;

    // Writes it must not do.
    let (pool_api, pool) = dynamic(
        &lab,
        &speaker,
        ms,
        "IPAddressPool",
        &format!("e2e-{suffix}"),
        json!({"spec": {"addresses": ["198.51.100.200/32"]}}),
    );
    c.refused(
        "create an IPAddressPool in metallb-system",
        pool_api.create(&PostParams::default(), &pool).await,
    );
    let (peer_api, peer) = dynamic(
        &lab,
        &speaker,
        ms,
        "BGPPeer",
        &format!("e2e-{suffix}"),
        json!({"spec": {"myASN": 64513, "peerASN": 64512, "peerAddress": "192.0.2.1"}}),
    );
    c.refused(
        "create a BGPPeer in metallb-system",
        peer_api.create(&PostParams::default(), &peer).await,
    );
    let speaker_leases = Api::<Lease>::namespaced(speaker.clone(), ms);
    c.refused(
        "get the controller's Lease",
        speaker_leases.get(CONTROLLER_LEASE).await,
    );
    c.refused(
        "update the controller's Lease (leader election is the controller's)",
        speaker_leases
            .replace(
                CONTROLLER_LEASE,
                &PostParams::default(),
                &lease(CONTROLLER_LEASE),
            )
            .await,
    );
    c.refused(
        "create a Lease in metallb-system",
        speaker_leases
            .create(
                &PostParams::default(),
                &lease(&format!("e2e-speaker-{suffix}")),
            )
            .await,
    );
    let svcs = Api::<Service>::namespaced(speaker.clone(), &other.name);
    let mut with_ip = svc.clone();
    with_ip.status = Some(serde_json::from_value(
        json!({"loadBalancer": {"ingress": [{"ip": "198.51.100.10"}]}}),
    )?);
    c.refused(
        "update services/status (the controller's job)",
        svcs.replace_status("web", &PostParams::default(), &with_ip)
            .await,
    );
    c.refused(
        "patch a Service (the allocation annotation is the controller's)",
        svcs.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"metallb.io/ip-allocated-from-pool": "x"}}}),
            ),
        )
        .await,
    );
    let (l2_other, mut l2o) = dynamic(
        &lab,
        &speaker,
        &other.name,
        "ServiceL2Status",
        "",
        json!({}),
    );
    l2o.metadata.name = None;
    l2o.metadata.generate_name = Some("l2-".into());
    c.refused(
        "create a ServiceL2Status in another namespace",
        l2_other.create(&PostParams::default(), &l2o).await,
    );
    let (cs_other, cs_o) = dynamic(
        &lab,
        &speaker,
        &other.name,
        "ConfigurationState",
        &cs_name,
        json!({}),
    );
    c.refused(
        "create a ConfigurationState in another namespace",
        cs_other.create(&PostParams::default(), &cs_o).await,
    );
    c.refused(
        "list Secrets in another namespace",
        Api::<Secret>::namespaced(speaker.clone(), &other.name)
            .list(&ListParams::default())
            .await,
    );
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("e2e-{suffix}")),
            ..Default::default()
        },
        ..Default::default()
    };
    c.refused(
        "create a ConfigMap in metallb-system",
        Api::<ConfigMap>::namespaced(speaker.clone(), ms)
            .create(&PostParams::default(), &cm)
            .await,
    );
    c.refused(
        "delete a Service",
        svcs.delete("web", &DeleteParams::default()).await,
    );
    c.refused(
        "patch a Node",
        Api::<Node>::all(speaker.clone())
            .patch(
                "node-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"e2e": "x"}}})),
            )
            .await,
    );

    // Clean up what the admin must (the ConfigurationState the speaker may not delete).
    let _ = lab
        .metallb(&lab.client, ms, "ConfigurationState")
        .delete(&cs_name, &DeleteParams::default())
        .await;
    other.delete().await?;
    c.finish()
}

#[tokio::test]
async fn controller_token_may_allocate_but_not_announce_or_configure() -> Result<()> {
    let lab = Lab::connect().await?;
    lab.apply_deploy_rbac().await?;
    let other = lab.test_namespace("rbac-controller").await?;
    let (svc, _) = lab
        .create_lb_service(
            &other.name,
            &LbService::new("web").endpoints(vec![EndpointSpec::ready("node-2")]),
        )
        .await?;
    let ms = METALLB_NAMESPACE;
    let suffix = unique_suffix();
    // A pool to report usage on, made by the admin.
    let pool_name = format!("e2e-{suffix}");
    let (admin_pools, pool) = dynamic(
        &lab,
        &lab.client,
        ms,
        "IPAddressPool",
        &pool_name,
        json!({"spec": {"addresses": ["198.51.100.0/24"]}}),
    );
    admin_pools.create(&PostParams::default(), &pool).await?;

    let controller = lab.client_as(ms, "controller").await?;
    let mut c = Checks::new("system:serviceaccount:metallb-system:controller");

    // Reads it needs.
    c.allowed(
        "list Services in all namespaces",
        Api::<Service>::all(controller.clone())
            .list(&ListParams::default())
            .await,
    );
    c.allowed(
        "list Namespaces",
        Api::<Namespace>::all(controller.clone())
            .list(&ListParams::default())
            .await,
    );
    c.allowed(
        "list IPAddressPools in metallb-system",
        lab.metallb(&controller, ms, "IPAddressPool")
            .list(&ListParams::default())
            .await,
    );
    c.allowed(
        "list Communities in metallb-system",
        lab.metallb(&controller, ms, "Community")
            .list(&ListParams::default())
            .await,
    );

    // The allocation: services/status and the annotation.
    let svcs = Api::<Service>::namespaced(controller.clone(), &other.name);
    let mut with_ip = svc.clone();
    with_ip.status = Some(serde_json::from_value(
        json!({"loadBalancer": {"ingress": [{"ip": "198.51.100.10"}]}}),
    )?);
    c.allowed(
        "patch services/status (the LoadBalancer IP)",
        svcs.patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.10"}]}}}),
            ),
        )
        .await,
    );
    c.refused(
        "update services/status (only patch: no code path replaces it)",
        svcs.replace_status("web", &PostParams::default(), &with_ip)
            .await,
    );
    c.allowed(
        "patch a Service's annotation metallb.io/ip-allocated-from-pool",
        svcs.patch("web", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"metallb.io/ip-allocated-from-pool": pool_name}}}))).await,
    );
    let pools = lab.metallb(&controller, ms, "IPAddressPool");
    c.allowed(
        "write an IPAddressPool's status",
        pools.patch_status(&pool_name, &PatchParams::default(), &Patch::Merge(json!({"status": {"assignedIPv4": 1, "assignedIPv6": 0, "availableIPv4": 255, "availableIPv6": 0}}))).await,
    );
    c.refused(
        "create an Event (core; the controller writes events.k8s.io only)",
        Api::<Event>::namespaced(controller.clone(), &other.name)
            .create(
                &PostParams::default(),
                &core_event(&other.name, &svc, "IPAllocated"),
            )
            .await,
    );
    c.allowed(
        "create an Event (events.k8s.io) about a Service",
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(controller.clone(), &other.name)
            .create(
                &PostParams::default(),
                &events_v1(&other.name, &svc, "IPAllocated", "metallb.io/controller")?,
            )
            .await,
    );

    metrics_reviews(&mut c, &controller).await;

    // Its ConfigurationState `controller`, and only that one.
    let states = lab.metallb(&controller, ms, "ConfigurationState");
    let existed = lab
        .metallb(&lab.client, ms, "ConfigurationState")
        .get_opt("controller")
        .await?
        .is_some();
    if !existed {
        let (_, cs) = dynamic(
            &lab,
            &controller,
            ms,
            "ConfigurationState",
            "controller",
            json!({}),
        );
        c.allowed(
            "create its ConfigurationState `controller`",
            states.create(&PostParams::default(), &cs).await,
        );
    }
    c.allowed(
        "get its ConfigurationState `controller`",
        states.get("controller").await,
    );
    c.allowed(
        "list/watch its ConfigurationState by name (fieldSelector metadata.name=controller)",
        states
            .list(&ListParams::default().fields("metadata.name=controller"))
            .await,
    );
    c.allowed(
        "write its ConfigurationState's status",
        states
            .patch_status(
                "controller",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"result": "Valid"}})),
            )
            .await,
    );
    c.refused(
        "list all ConfigurationStates",
        states.list(&ListParams::default()).await,
    );
    c.refused(
        "get another ConfigurationState (speaker-node-1)",
        states.get("speaker-node-1").await,
    );
    c.refused(
        "write another ConfigurationState's status",
        states
            .patch_status(
                "speaker-node-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"result": "Valid"}})),
            )
            .await,
    );

    // Leader election: its own Lease `metallb-rs-controller`, and only that one. A
    // controller may be running in metallb-system: the update writes the Lease back as read
    // (a no-op, so a holder keeps it), and a 409 from a concurrent renewal still shows that
    // RBAC allowed the write.
    let leases = Api::<Lease>::namespaced(controller.clone(), ms);
    let admin_leases = Api::<Lease>::namespaced(lab.client.clone(), ms);
    let lease_existed = admin_leases.get_opt(CONTROLLER_LEASE).await?.is_some();
    if !lease_existed {
        c.allowed_or_conflict(
            "create its Lease metallb-rs-controller",
            leases
                .create(&PostParams::default(), &lease(CONTROLLER_LEASE))
                .await,
        );
    }
    let mut our_lease_version = None;
    if let Some(l) = c.allowed("get its Lease", leases.get(CONTROLLER_LEASE).await) {
        our_lease_version = l.metadata.resource_version.clone();
        c.allowed_or_conflict(
            "update its Lease (at the version read)",
            leases
                .replace(CONTROLLER_LEASE, &PostParams::default(), &l)
                .await,
        );
    }
    let other_lease = format!("e2e-controller-{suffix}");
    c.refused("get another Lease", leases.get(&other_lease).await);
    c.refused(
        "update another Lease",
        leases
            .replace(&other_lease, &PostParams::default(), &lease(&other_lease))
            .await,
    );
    c.refused("list Leases", leases.list(&ListParams::default()).await);
    c.refused(
        "delete its Lease",
        leases
            .delete(CONTROLLER_LEASE, &DeleteParams::default())
            .await,
    );
    c.refused(
        "create a Lease in another namespace",
        Api::<Lease>::namespaced(controller.clone(), &other.name)
            .create(&PostParams::default(), &lease(CONTROLLER_LEASE))
            .await,
    );

    // What it must not do.
    let (_, p2) = dynamic(
        &lab,
        &controller,
        ms,
        "IPAddressPool",
        &format!("e2e-new-{suffix}"),
        json!({"spec": {"addresses": ["198.51.100.200/32"]}}),
    );
    c.refused(
        "create an IPAddressPool",
        pools.create(&PostParams::default(), &p2).await,
    );
    c.refused(
        "change an IPAddressPool's spec",
        pools
            .patch(
                &pool_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"autoAssign": false}})),
            )
            .await,
    );
    c.refused(
        "delete an IPAddressPool",
        pools.delete(&pool_name, &DeleteParams::default()).await,
    );
    let (l2api, mut l2) = dynamic(&lab, &controller, ms, "ServiceL2Status", "", json!({}));
    l2.metadata.name = None;
    l2.metadata.generate_name = Some("l2-".into());
    c.refused(
        "create a ServiceL2Status (the speaker's)",
        l2api.create(&PostParams::default(), &l2).await,
    );
    c.allowed(
        "list Nodes (the webhooks' node selector checks)",
        Api::<Node>::all(controller.clone())
            .list(&ListParams::default())
            .await,
    );
    c.refused(
        "list EndpointSlices (the controller needs none)",
        Api::<EndpointSlice>::all(controller.clone())
            .list(&ListParams::default())
            .await,
    );
    c.refused(
        "list Secrets in metallb-system",
        Api::<Secret>::namespaced(controller.clone(), ms)
            .list(&ListParams::default())
            .await,
    );
    c.refused(
        "update a Service (only patch)",
        svcs.replace("web", &PostParams::default(), &svc).await,
    );
    c.refused(
        "delete a Service",
        svcs.delete("web", &DeleteParams::default()).await,
    );

    if !existed {
        let _ = lab
            .metallb(&lab.client, ms, "ConfigurationState")
            .delete("controller", &DeleteParams::default())
            .await;
    }
    let _ = admin_pools
        .delete(&pool_name, &DeleteParams::default())
        .await;
    if !lease_existed {
        // Only the Lease this test created, and only if nobody has written it since (a
        // controller that started meanwhile keeps its Lease).
        if let Some(version) = our_lease_version {
            let _ = admin_leases
                .delete(
                    CONTROLLER_LEASE,
                    &DeleteParams {
                        preconditions: Some(Preconditions {
                            resource_version: Some(version),
                            uid: None,
                        }),
                        ..DeleteParams::default()
                    },
                )
                .await;
        }
    }
    other.delete().await?;
    c.finish()
}
