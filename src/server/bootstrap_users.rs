//! `[sasl] bootstrap_users`: each is given SCRAM-SHA-256 and SCRAM-SHA-512 credentials at
//! start where it has none for that mechanism. The check is the controller's (`if_absent`), so
//! a password changed since (AlterUserScramCredentials) is kept, whatever catalog this node
//! has caught up to. The password itself is never stored.

use crate::controller::security_ops::SecurityChange;
use crate::controller::{self, ControllerOp, Controllers};
use crate::security::scram::{self, Credential};
use crate::storage::security::ScramCredentialRecord;
use std::rc::Rc;
use std::time::Duration;

/// PBKDF2 rounds for a bootstrap user's credentials (Kafka's minimum, and its tools' default).
const ITERATIONS: u32 = scram::MIN_ITERATIONS;
/// Between attempts while a cluster has no active controller.
const RETRY_MS: u64 = 1_000;
/// Bound on attempts (a minute): a cluster without a controller for longer logs and gives up.
const MAX_ATTEMPTS: u32 = 60;

/// Creates the bootstrap users' missing credentials, retrying while the controller is away.
pub async fn ensure(controllers: Rc<Controllers>) {
    let shard = &controllers.shard;
    let users = &shard.config.sasl.bootstrap_users;
    if users.is_empty() {
        return;
    }
    // On a single node the catalog here is the controller's own: PBKDF2 runs only for what it
    // lacks (on the shard's thread, so a start with many users would otherwise derive every
    // password again). In a cluster this node's catalog may lag, so the controller's
    // `if_absent` decides.
    let catalog = shard.catalog();
    let missing =
        |name: &str, m| catalog.is_clustered() || catalog.security.credential(name, m).is_none();
    let changes: Vec<SecurityChange> = users
        .iter()
        .flat_map(|u| {
            let absent = scram::Mechanism::ALL
                .into_iter()
                .filter(|m| missing(&u.name, *m));
            absent.map(|m| {
                let salt = uuid::Uuid::new_v4().into_bytes(); // 122 random bits (getrandom)
                let c = Credential::new(m, u.password.as_bytes(), &salt, ITERATIONS);
                SecurityChange::SetCredential {
                    record: ScramCredentialRecord::new(&u.name, &c),
                    if_absent: true,
                }
            })
        })
        .collect();
    if changes.is_empty() {
        log::info!("bootstrap users: {} ready", users.len());
        return;
    }
    for attempt in 1..=MAX_ATTEMPTS {
        let op = ControllerOp::Security(changes.clone());
        let outcomes = controller::execute(&controllers, op).await;
        match outcomes.iter().find(|(code, _)| *code != 0) {
            None => {
                log::info!("bootstrap users: {} ready", users.len());
                return;
            }
            Some((code, message)) if attempt == MAX_ATTEMPTS => {
                log::error!("bootstrap users: not created: error {code} {message:?}");
            }
            Some(_) => glommio::timer::sleep(Duration::from_millis(RETRY_MS)).await,
        }
    }
}
