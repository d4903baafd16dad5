//! Dynamic broker configs (KIP-226) on the controller: a scope's overrides replaced
//! (AlterConfigs) or edited key by key (IncrementalAlterConfigs), checked against the broker
//! key table and by resolving the whole catalog with them, then persisted and installed like
//! any catalog change.

use super::records::MetadataRecord;
use super::{err, ConfigChange, Outcome};
use crate::shard::Shard;
use crate::storage::broker_config::{self, dynamic_key};
use crate::storage::catalog::{self, Catalog, CatalogRecord};
use kafka_protocol::ResponseError;

/// One scope's change: its outcome, and the record that makes it (None: nothing changes).
pub(super) fn alter(
    shard: &Shard,
    current: &Catalog,
    record: &CatalogRecord,
    broker: &str,
    change: ConfigChange,
    validate_only: bool,
) -> (Vec<Outcome>, Option<MetadataRecord>) {
    match checked(shard, current, record, broker, change) {
        Err(outcome) => (vec![outcome], None),
        Ok(next) => {
            if validate_only || next == record.scope_configs(broker) {
                return (vec![(0, None)], None);
            }
            let scope = if broker.is_empty() { "cluster" } else { broker };
            log::info!("dynamic broker configs ({scope}) now {next:?}");
            let change = MetadataRecord::SetBrokerConfigs {
                scope: broker.to_string(),
                configs: next,
            };
            (vec![(0, None)], Some(change))
        }
    }
}

/// The scope's new overrides, if every key is dynamic and the catalog resolves with them.
fn checked(
    shard: &Shard,
    current: &Catalog,
    record: &CatalogRecord,
    broker: &str,
    change: ConfigChange,
) -> Result<Vec<(String, String)>, Outcome> {
    let names: Vec<&str> = match &change {
        ConfigChange::Replace(o) => o.iter().map(|(k, _)| k.as_str()).collect(),
        ConfigChange::Incremental(e) => e.iter().map(|(k, _, _)| k.as_str()).collect(),
    };
    let fixed: Vec<&str> = names
        .into_iter()
        .filter(|n| dynamic_key(n).is_none())
        .collect();
    if !fixed.is_empty() {
        let message = broker_config::not_dynamic(&fixed);
        return Err(err(ResponseError::InvalidRequest, message));
    }
    let next = match change {
        ConfigChange::Replace(overrides) => overrides,
        ConfigChange::Incremental(edits) => {
            let lookup = |name: &str| {
                let key = dynamic_key(name).expect("checked above");
                Ok((
                    key.kind(),
                    key.read(&current.broker, &current.topic_defaults),
                ))
            };
            catalog::edit_keyed_overrides(record.scope_configs(broker), &edits, lookup)
                .map_err(|m| err(ResponseError::InvalidConfig, m))?
        }
    };
    let mut candidate = record.clone();
    candidate.set_scope_configs(broker, next.clone());
    Catalog::from_record(&candidate, &shard.config)
        .map_err(|m| err(ResponseError::InvalidConfig, m))?;
    Ok(next)
}
