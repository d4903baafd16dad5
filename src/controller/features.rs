//! UpdateFeatures on the active controller (KIP-584, KIP-778): a feature's level is raised
//! only once every registered broker, fenced or not, has told this controller that its binary
//! runs at that level; it is never lowered (a catalog written at a level cannot be read
//! below it). Brokers tell the levels they support over RPC (`messages::FEATURES`) at each
//! new active controller and every 10 s after; a broker that has not (an older Sluice, which
//! knows no levels) supports only level 1. The ranges are kept in memory: a new or restarted
//! controller hears them again within 10 s.

use super::records::MetadataRecord;
use super::Outcome;
use crate::storage::catalog::CatalogRecord;
use crate::storage::features::{self, MAX_METADATA_VERSION, METADATA_VERSION};
use kafka_protocol::ResponseError;
use std::collections::HashMap;

/// UpdateFeatures' `upgrade_type`: raise only.
pub const UPGRADE: i8 = 1;

/// One feature to finalise at a level.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct FeatureUpdate {
    pub name: String,
    pub level: i16,
    pub upgrade_type: i8,
}

/// The `metadata.version` range each registered broker said it supports, by node id, with the
/// incarnation that said it (a restart may bring another binary).
#[derive(Default)]
pub struct SupportedRanges {
    by_node: HashMap<i32, (u64, i16, i16)>,
}

impl SupportedRanges {
    pub fn note(&mut self, node_id: i32, incarnation: u64, (min, max): (i16, i16)) {
        self.by_node.insert(node_id, (incarnation, min, max));
    }

    /// What incarnation `incarnation` of `node_id` said; None: it has not said.
    pub fn of(&self, node_id: i32, incarnation: u64) -> Option<(i16, i16)> {
        let &(said_by, min, max) = self.by_node.get(&node_id)?;
        (said_by == incarnation).then_some((min, max))
    }
}

/// The range this binary supports, as it tells the controller.
pub fn own_range() -> (i16, i16) {
    (features::MIN_METADATA_VERSION, MAX_METADATA_VERSION)
}

/// Checks `updates` against the catalog and the brokers' ranges: the records that finalise
/// them (none where a level is already final), or why not. All or nothing.
pub fn update(
    record: &CatalogRecord,
    ranges: &SupportedRanges,
    updates: &[FeatureUpdate],
) -> Result<Vec<MetadataRecord>, Outcome> {
    let mut out = Vec::new();
    for u in updates {
        if let Some(r) = one(record, ranges, u)? {
            out.push(r);
        }
    }
    Ok(out)
}

fn one(
    record: &CatalogRecord,
    ranges: &SupportedRanges,
    u: &FeatureUpdate,
) -> Result<Option<MetadataRecord>, Outcome> {
    let refuse = |m: String| (ResponseError::InvalidUpdateVersion.code(), Some(m));
    if u.name != METADATA_VERSION {
        return Err(refuse(format!(
            "unknown feature {}: Sluice finalises {METADATA_VERSION} only",
            u.name
        )));
    }
    let current = features::level(record.metadata_version);
    if u.level < current {
        return Err(refuse(format!(
            "{METADATA_VERSION} cannot be lowered from {current} to {}: the catalog of level {current} cannot be read below it",
            u.level
        )));
    }
    if u.upgrade_type != UPGRADE && u.level > current {
        return Err(refuse(format!(
            "a downgrade cannot raise {METADATA_VERSION} from {current} to {}",
            u.level
        )));
    }
    if u.level == current {
        return Ok(None);
    }
    if !features::supported(u.level) {
        return Err(refuse(format!(
            "{METADATA_VERSION} {} is outside this controller's range {}..={MAX_METADATA_VERSION}",
            u.level,
            features::MIN_METADATA_VERSION
        )));
    }
    for b in &record.brokers {
        let range = ranges.of(b.node_id, b.incarnation);
        if !range.is_some_and(|(min, max)| (min..=max).contains(&u.level)) {
            let said = range.map_or("said no levels (an older Sluice)".to_string(), |r| {
                format!("supports {}..={}", r.0, r.1)
            });
            return Err(refuse(format!(
                "broker {} {said}: {METADATA_VERSION} {} needs every registered broker to run it",
                b.node_id, u.level
            )));
        }
    }
    let level = (METADATA_VERSION.to_string(), u.level);
    Ok(Some(MetadataRecord::SetFeatureLevel(Box::new(level))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::catalog::BrokerRecord;

    fn broker(node_id: i32, incarnation: u64, fenced: bool) -> BrokerRecord {
        BrokerRecord {
            node_id,
            incarnation,
            listeners: Vec::new(),
            rack: None,
            fenced,
        }
    }

    fn raise(level: i16) -> Vec<FeatureUpdate> {
        vec![FeatureUpdate {
            name: METADATA_VERSION.into(),
            level,
            upgrade_type: UPGRADE,
        }]
    }

    #[test]
    fn a_level_is_raised_once_every_registered_broker_runs_it() {
        let mut c = CatalogRecord {
            brokers: vec![broker(1, 10, false), broker(2, 20, true)],
            ..CatalogRecord::default()
        };
        let mut ranges = SupportedRanges::default();
        ranges.note(1, 10, (1, 2));
        let refused = update(&c, &ranges, &raise(2)).unwrap_err();
        assert_eq!(refused.0, ResponseError::InvalidUpdateVersion.code());
        assert!(refused.1.unwrap().contains("broker 2 said no levels"));
        // A fenced broker counts; a range said by another incarnation does not.
        ranges.note(2, 19, (1, 2));
        assert!(update(&c, &ranges, &raise(2)).is_err());
        ranges.note(2, 20, (1, 2));
        let records = update(&c, &ranges, &raise(2)).unwrap();
        assert_eq!(records.len(), 1);
        crate::controller::records::apply(&mut c, &records).unwrap();
        assert_eq!(c.metadata_version, 2);
        assert_eq!(
            update(&c, &ranges, &raise(2)),
            Ok(Vec::new()),
            "already final"
        );
        let lowered = update(&c, &ranges, &raise(1)).unwrap_err();
        assert!(lowered.1.unwrap().contains("cannot be lowered"));
        assert!(
            update(&c, &ranges, &raise(3)).is_err(),
            "beyond this binary"
        );
        let mut other = raise(2);
        other[0].name = "kraft.version".into();
        assert!(update(&c, &ranges, &other).is_err());
    }
}
