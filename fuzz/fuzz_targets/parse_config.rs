//! Arbitrary bytes as a multi-document YAML file through the loader and
//! `config::parse`: neither may panic, and both must stay within the
//! loader's size and alias budgets.
#![no_main]

use config::load::{LoadOptions, Loader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for strict in [false, true] {
        let mut loader = Loader::new(LoadOptions {
            strict,
            ..LoadOptions::default()
        });
        if loader.add_str("fuzz.yaml", text).is_err() {
            continue;
        }
        let loaded = loader.finish();
        if let Ok(cfg) = config::parse(&loaded.resources) {
            // Serialising the result must work for any accepted input.
            let _ = cfg.summary().to_string();
        }
    }
});
