//! The speaker's configuration: the last good one stays in force when a new one is
//! invalid, and what to report about each attempt.

use config::Config;

/// What an attempt to load a configuration did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// A new valid configuration replaced the running one (or was the first).
    Accepted,
    /// Valid and equal to the running one: nothing to apply.
    Unchanged,
    /// Invalid: the running configuration (if any) stays; the error, for the
    /// ConfigurationState (without the `configuration error: ` prefix).
    Invalid(String),
}

/// The running configuration and the state of the latest attempt.
#[derive(Debug, Default)]
pub struct ConfigTracker {
    running: Option<Config>,
    stale: bool,
}

impl ConfigTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the outcome of parsing the latest objects.
    pub fn load(&mut self, parsed: Result<Config, String>) -> Loaded {
        match parsed {
            Err(e) => {
                self.stale = true;
                Loaded::Invalid(e)
            }
            Ok(cfg) => {
                // A revert to the running configuration is not stale any more
                // (MetalLB leaves `config_stale_bool` at 1 there).
                self.stale = false;
                if self.running.as_ref() == Some(&cfg) {
                    Loaded::Unchanged
                } else {
                    self.running = Some(cfg);
                    Loaded::Accepted
                }
            }
        }
    }

    /// The configuration in force (`None` before the first valid one: Services are
    /// not handled until then).
    pub fn running(&self) -> Option<&Config> {
        self.running.as_ref()
    }

    /// `metallb_k8s_client_config_loaded_bool`.
    pub fn loaded(&self) -> bool {
        self.running.is_some()
    }

    /// `metallb_k8s_client_config_stale_bool`: the latest attempt failed.
    pub fn stale(&self) -> bool {
        self.stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::Resources;
    use config::api::v1beta1;
    use std::sync::Arc;

    fn cfg(addresses: &[&str]) -> Config {
        let pool = v1beta1::IPAddressPool {
            metadata: kube::api::ObjectMeta {
                name: Some("a".into()),
                namespace: Some("metallb-system".into()),
                ..Default::default()
            },
            spec: v1beta1::IPAddressPoolSpec {
                addresses: addresses.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
            status: None,
        };
        config::parse(&Resources {
            pools: vec![Arc::new(pool)],
            ..Resources::default()
        })
        .unwrap()
    }

    #[test]
    fn the_last_good_configuration_stays_and_a_revert_is_not_stale() {
        let mut t = ConfigTracker::new();
        assert!(!t.loaded() && !t.stale() && t.running().is_none());
        // Invalid before any valid one: nothing runs.
        assert_eq!(t.load(Err("bad".into())), Loaded::Invalid("bad".into()));
        assert!(!t.loaded() && t.stale());
        assert_eq!(t.load(Ok(cfg(&["198.51.100.0/24"]))), Loaded::Accepted);
        assert!(t.loaded() && !t.stale());
        assert_eq!(t.load(Ok(cfg(&["198.51.100.0/24"]))), Loaded::Unchanged);
        // A bad edit: the running configuration stays.
        assert_eq!(
            t.load(Err("overlap".into())),
            Loaded::Invalid("overlap".into())
        );
        assert!(t.loaded() && t.stale());
        assert_eq!(t.running(), Some(&cfg(&["198.51.100.0/24"])));
        // Reverted to exactly the running configuration: not stale (MetalLB stays 1).
        assert_eq!(t.load(Ok(cfg(&["198.51.100.0/24"]))), Loaded::Unchanged);
        assert!(!t.stale());
        assert_eq!(t.load(Ok(cfg(&["203.0.113.0/24"]))), Loaded::Accepted);
        assert_eq!(t.running(), Some(&cfg(&["203.0.113.0/24"])));
    }
}
