#[test]
fn dump() {
    for c in config::crd::all() {
        std::fs::write(
            format!("/tmp/crd-{}.json", c.spec.names.plural),
            serde_json::to_string_pretty(&c).unwrap(),
        )
        .unwrap();
    }
}
