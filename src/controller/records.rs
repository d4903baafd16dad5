//! The metadata log's records: what the controller's Raft log holds, and how a node applies a
//! committed entry to its catalog (pure: no I/O, no clock). Every node applies the same entries
//! in the same order, so every node holds the same catalog.
//!
//! An entry is a batch of records applied all or nothing: one controller request (say, a
//! CreateTopics of three topics) is one entry. Entries are versioned rkyv; a node refuses an
//! entry of a newer version by name rather than misreading it.

use crate::storage::catalog::{
    scope_configs, BrokerRecord, BrokerRecordV1, CatalogRecord, PartitionAssignment, TopicEpochs,
    TopicRecord,
};
use crate::storage::features::{self, MAX_METADATA_VERSION, PARTITION_EPOCHS};
use crate::storage::security::{self, AclRecord, ScramCredentialRecord};
use crate::storage::topic_config::UNCLEAN_LEADER_ELECTION;
use std::collections::HashMap;

/// The entry format this Sluice writes, and the newest it reads.
const FORMAT_VERSION: u8 = 1;
/// Bound on the records of one entry (a request's topics are bounded far below this).
pub const MAX_RECORDS_PER_ENTRY: usize = 100_000;

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub enum MetadataRecord {
    /// The cluster's id, proposed once by the first controller (the log's first record).
    ClusterId(String),
    /// `RegisterBroker` as written before listener lists: one PLAINTEXT listener.
    RegisterBrokerV1(BrokerRecordV1),
    /// A broker's session expired: it leads nothing until it registers again.
    FenceBroker {
        node_id: i32,
        incarnation: u64,
    },
    /// A new topic, with its assignment.
    CreateTopic(TopicRecord),
    DeleteTopic {
        id: [u8; 16],
    },
    /// The topic now has `count` partitions; `added` assigns the new ones (empty on a single
    /// node).
    CreatePartitions {
        id: [u8; 16],
        count: u32,
        added: Vec<PartitionAssignment>,
    },
    SetTopicConfigs {
        id: [u8; 16],
        configs: Vec<(String, String)>,
    },
    /// Dynamic broker configs of one scope ("" or a node id); empty drops the scope.
    SetBrokerConfigs {
        scope: String,
        configs: Vec<(String, String)>,
    },
    /// Producer ids below `end` may have been handed out.
    ProducerIdBlock {
        end: i64,
    },
    /// A partition gets a new leader (ElectLeaders, preferred-leader rebalancing) in a new
    /// epoch; `isr` replaces the in-sync set (an unclean election) when given.
    ElectLeader {
        id: [u8; 16],
        partition: i32,
        leader: i32,
        isr: Option<Vec<i32>>,
    },
    /// A partition's whole assignment, as a reassignment (KIP-455) starts, completes or is
    /// cancelled. Computed by the controller from the partition at leader epoch `epoch`; a
    /// record that meets another epoch (a fence applied in between) changes nothing.
    SetAssignment {
        id: [u8; 16],
        partition: i32,
        epoch: i32,
        assignment: PartitionAssignment,
    },
    /// A partition's in-sync replicas changed, in leader epoch `epoch`; in another epoch it
    /// changes nothing. Written before `AlterIsr`; read from older logs.
    ChangeIsr {
        id: [u8; 16],
        partition: i32,
        epoch: i32,
        isr: Vec<i32>,
    },
    /// A partition's in-sync replicas changed (its leader asked: AlterPartition, KIP-497) from
    /// `from` to `isr`, in leader epoch `epoch`. Where the set is no longer `from` when the
    /// record applies (a fence committed between the controller's check and this record), or
    /// the epoch moved on, it changes nothing: the leader counts on that (`partition/commit.rs`).
    AlterIsr {
        id: [u8; 16],
        partition: i32,
        epoch: i32,
        from: Vec<i32>,
        isr: Vec<i32>,
    },
    // The variants below were added after entries were first written: an archived entry is an
    // array of fixed-size variants, so a new one must not be larger than the largest before it
    // (boxed payloads keep them small; `archived_size_is_stable` checks).
    /// A user's SCRAM credential for one mechanism, set or replaced
    /// (AlterUserScramCredentials, bootstrap users).
    SetScramCredential(Box<ScramCredentialRecord>),
    /// A user's credential for one mechanism removed.
    DeleteScramCredential(Box<(String, i8)>),
    /// An ACL added (CreateAcls); adding one that exists changes nothing.
    CreateAcl(Box<AclRecord>),
    /// An ACL removed (DeleteAcls).
    DeleteAcl(Box<AclRecord>),
    /// A broker (re)registered, with its listeners: replaces its previous registration,
    /// unfenced. Partitions left without a leader that it holds in sync get it back as leader.
    RegisterBroker(Box<BrokerRecord>),
    // From here on, written only at the level each names (`storage::features`): an older
    // Sluice cannot read them, and runs only below that level.
    /// A feature finalised at a level (UpdateFeatures; a new cluster's first entry): only
    /// `metadata.version`, raised from level 2 on. Every partition's epoch starts at 0 as
    /// the level reaches `PARTITION_EPOCHS`.
    SetFeatureLevel(Box<(String, i16)>),
    /// A leader's in-sync set change (AlterPartition) computed at partition epoch
    /// `partition_epoch` (level `PARTITION_EPOCHS` on): at any other epoch it changes nothing.
    AlterPartition(Box<PartitionChange>),
}

/// An in-sync set change at a partition epoch.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct PartitionChange {
    pub id: [u8; 16],
    pub partition: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

/// Err where `records` finalise a level this binary does not run: a newer Sluice raised
/// it, and this one must not go on with a catalog it can no longer keep (the node stops and
/// says so; 0.1, which knew no levels, logged such entries as corrupt and ran on).
pub fn check_level(records: &[MetadataRecord]) -> Result<(), String> {
    for r in records {
        if let MetadataRecord::SetFeatureLevel(f) = r {
            if f.0 == features::METADATA_VERSION && f.1 > MAX_METADATA_VERSION {
                return Err(format!(
                    "the cluster runs {} {}; this Sluice runs up to {MAX_METADATA_VERSION}: run a Sluice that supports it",
                    f.0, f.1
                ));
            }
        }
    }
    Ok(())
}

/// A new cluster's first entry: its id, at the newest level this Sluice runs at.
pub fn bootstrap(cluster_id: String) -> Vec<MetadataRecord> {
    let level = (features::METADATA_VERSION.to_string(), MAX_METADATA_VERSION);
    vec![
        MetadataRecord::ClusterId(cluster_id),
        MetadataRecord::SetFeatureLevel(Box::new(level)),
    ]
}

/// One log entry's bytes: the version, then the records in rkyv.
pub fn encode(records: &[MetadataRecord]) -> Vec<u8> {
    assert!(records.len() <= MAX_RECORDS_PER_ENTRY, "entry too large");
    let body = rkyv::to_bytes::<rkyv::rancor::Error>(&records.to_vec())
        .expect("metadata records always serialize");
    let mut out = Vec::with_capacity(1 + body.len());
    out.push(FORMAT_VERSION);
    out.extend_from_slice(&body);
    out
}

/// An entry's records; Err for bytes that are not an entry this Sluice can read.
pub fn decode(raw: &[u8]) -> Result<Vec<MetadataRecord>, String> {
    let (version, body) = raw.split_first().ok_or("empty entry")?;
    if *version != FORMAT_VERSION {
        return Err(format!(
            "entry format version {version}; this Sluice reads {FORMAT_VERSION}"
        ));
    }
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    aligned.extend_from_slice(body);
    let records = rkyv::from_bytes::<Vec<MetadataRecord>, rkyv::rancor::Error>(&aligned)
        .map_err(|e| format!("corrupt entry: {e}"))?;
    if records.len() > MAX_RECORDS_PER_ENTRY {
        return Err(format!("{} records in one entry", records.len()));
    }
    Ok(records)
}

/// Applies an entry's records to `catalog`, all or nothing. Err: a record that contradicts the
/// catalog (a bug or a corrupt log); the catalog is then unchanged.
pub fn apply(catalog: &mut CatalogRecord, records: &[MetadataRecord]) -> Result<(), String> {
    let mut next = catalog.clone();
    for r in records {
        apply_one(&mut next, r)?;
    }
    check_changed_assignments(catalog, &next)?;
    if features::level(next.metadata_version) >= PARTITION_EPOCHS {
        renew_partition_epochs(catalog, &mut next);
    }
    *catalog = next;
    Ok(())
}

/// The invariants of every assignment an entry changed: the in-sync set and the moving
/// replicas lie within the replicas, a leader is an in-sync replica (or there is none, -1),
/// and a partition's leader epoch never goes back. The controller's own changes must keep
/// them (it applies each to a working copy first, and fails loudly there); an entry read back
/// that breaks one is refused whole.
fn check_changed_assignments(before: &CatalogRecord, after: &CatalogRecord) -> Result<(), String> {
    for (t, was) in with_previous_assignments(before, after) {
        for (p, a) in t.assignment.iter().enumerate() {
            let prior = was.get(p);
            if prior == Some(a) {
                continue;
            }
            let within = |v: &[i32]| v.iter().all(|n| a.replicas.contains(n));
            let led = a.leader == -1 || a.isr.contains(&a.leader);
            let forward = prior.is_none_or(|o| o.leader_epoch <= a.leader_epoch);
            if !(within(&a.isr) && within(&a.adding) && within(&a.removing) && led && forward) {
                return Err(format!("{}-{p}: assignment {a:?} after {prior:?}", t.name));
            }
        }
    }
    Ok(())
}

/// Each topic of `after` with its assignments in `before` (none for a new topic), looked up by
/// topic id so that an entry costs one pass over the catalog, not one per topic.
fn with_previous_assignments<'a>(
    before: &'a CatalogRecord,
    after: &'a CatalogRecord,
) -> impl Iterator<Item = (&'a TopicRecord, &'a [PartitionAssignment])> {
    let old: HashMap<&[u8; 16], &TopicRecord> = before.topics.iter().map(|t| (&t.id, t)).collect();
    let previous = move |id| {
        old.get(id)
            .map_or(&[][..], |o: &&TopicRecord| &o.assignment[..])
    };
    after.topics.iter().map(move |t| (t, previous(&t.id)))
}

/// Every partition whose assignment `before` and `after` differ gets the next partition
/// epoch; a new one starts at 0, a deleted topic's go. Run once per entry, so an entry that
/// changes a partition twice moves its epoch once: every node applies the same entries, so
/// every node counts the same epochs.
fn renew_partition_epochs(before: &CatalogRecord, after: &mut CatalogRecord) {
    let mut kept: HashMap<[u8; 16], Vec<i32>> = std::mem::take(&mut after.partition_epochs)
        .into_iter()
        .map(|e| (e.id, e.epochs))
        .collect();
    let mut epochs = Vec::with_capacity(after.topics.len());
    for (t, was) in with_previous_assignments(before, after) {
        let mut e = kept.remove(&t.id).unwrap_or_default();
        e.resize(t.assignment.len(), 0);
        for (p, a) in t.assignment.iter().enumerate() {
            if was.get(p).is_some_and(|o| o != a) {
                e[p] += 1;
            }
        }
        epochs.push(TopicEpochs {
            id: t.id,
            epochs: e,
        });
    }
    after.partition_epochs = epochs;
}

/// Partition `partition` of topic `id`'s epoch; None below level `PARTITION_EPOCHS`.
pub fn partition_epoch(c: &CatalogRecord, id: &[u8; 16], partition: i32) -> Option<i32> {
    c.partition_epochs
        .iter()
        .find(|t| t.id == *id)
        .and_then(|t| t.epochs.get(usize::try_from(partition).ok()?))
        .copied()
}

/// A feature finalised: `metadata.version` only, at a level this Sluice runs at, never lowered
/// (a catalog written at a level cannot be read below it).
fn set_feature_level(c: &mut CatalogRecord, name: &str, level: i16) -> Result<(), String> {
    if name != features::METADATA_VERSION || !features::supported(level) {
        return Err(format!("feature {name} at level {level} is unknown here"));
    }
    if level < features::level(c.metadata_version) {
        return Err(format!("{name} lowered to {level}"));
    }
    c.metadata_version = level;
    Ok(())
}

/// An in-sync set change at a partition epoch: none at another epoch.
fn alter_partition(c: &mut CatalogRecord, change: &PartitionChange) -> Result<(), String> {
    let epoch = partition_epoch(c, &change.id, change.partition);
    let a = assignment_mut(c, &change.id, change.partition)?;
    if epoch != Some(change.partition_epoch) {
        return Ok(());
    }
    set_isr(a, a.leader_epoch, None, &change.isr)
}

fn apply_one(c: &mut CatalogRecord, record: &MetadataRecord) -> Result<(), String> {
    match record {
        MetadataRecord::ClusterId(id) => c.cluster_id = id.clone(),
        MetadataRecord::RegisterBroker(b) => register(c, b),
        MetadataRecord::RegisterBrokerV1(b) => register(c, &BrokerRecord::from(b.clone())),
        MetadataRecord::FenceBroker {
            node_id,
            incarnation,
        } => fence(c, *node_id, *incarnation),
        MetadataRecord::CreateTopic(t) => {
            if c.topics.iter().any(|x| x.name == t.name || x.id == t.id) {
                return Err(format!("topic {} exists", t.name));
            }
            c.topics.push(t.clone());
        }
        MetadataRecord::DeleteTopic { id } => {
            let before = c.topics.len();
            c.topics.retain(|t| t.id != *id);
            if c.topics.len() == before {
                return Err("deleting a topic that does not exist".into());
            }
        }
        MetadataRecord::CreatePartitions { id, count, added } => {
            let t = topic_mut(c, id)?;
            if *count <= t.partitions {
                return Err(format!("topic {} already has {count} partitions", t.name));
            }
            t.partitions = *count;
            t.assignment.extend(added.iter().cloned());
        }
        MetadataRecord::SetTopicConfigs { id, configs } => {
            topic_mut(c, id)?.configs = configs.clone();
        }
        MetadataRecord::SetBrokerConfigs { scope, configs } => {
            c.set_scope_configs(scope, configs.clone());
        }
        MetadataRecord::ProducerIdBlock { end } => {
            c.producer_id_block_end = c.producer_id_block_end.max(*end);
        }
        MetadataRecord::ElectLeader { .. }
        | MetadataRecord::SetAssignment { .. }
        | MetadataRecord::ChangeIsr { .. }
        | MetadataRecord::AlterIsr { .. } => apply_to_partition(c, record)?,
        MetadataRecord::AlterPartition(change) => alter_partition(c, change)?,
        MetadataRecord::SetFeatureLevel(f) => set_feature_level(c, &f.0, f.1)?,
        MetadataRecord::SetScramCredential(_)
        | MetadataRecord::DeleteScramCredential(_)
        | MetadataRecord::CreateAcl(_)
        | MetadataRecord::DeleteAcl(_) => apply_security(c, record)?,
    }
    if matches!(
        record,
        MetadataRecord::CreateTopic(_)
            | MetadataRecord::CreatePartitions { .. }
            | MetadataRecord::ElectLeader { .. }
            | MetadataRecord::SetAssignment { .. }
            | MetadataRecord::ChangeIsr { .. }
            | MetadataRecord::AlterIsr { .. }
            | MetadataRecord::AlterPartition(_)
    ) {
        settle_fenced(c);
    }
    Ok(())
}

/// The records that change credentials and ACLs.
fn apply_security(c: &mut CatalogRecord, record: &MetadataRecord) -> Result<(), String> {
    match record {
        MetadataRecord::SetScramCredential(r) => {
            r.credential()
                .ok_or("a credential of an unknown mechanism")?;
            if !security::credential_fits(&c.scram_credentials, &r.user) {
                return Err("too many credentials".into());
            }
            security::set_credential(&mut c.scram_credentials, r);
        }
        MetadataRecord::DeleteScramCredential(r) => {
            if !security::delete_credential(&mut c.scram_credentials, &r.0, r.1) {
                return Err(format!("user {} has no credential {}", r.0, r.1));
            }
        }
        MetadataRecord::CreateAcl(a) => {
            a.acl().ok_or("an ACL of unknown codes")?;
            if !security::acl_fits(&c.acls, a) {
                return Err("too many ACLs".into());
            }
            if !c.acls.contains(a) {
                c.acls.push((**a).clone());
            }
        }
        MetadataRecord::DeleteAcl(a) => c.acls.retain(|x| x != &**a),
        _ => unreachable!("not a security record"),
    }
    Ok(())
}

/// The records that change one partition's assignment: elections, reassignments, in-sync
/// set changes.
fn apply_to_partition(c: &mut CatalogRecord, record: &MetadataRecord) -> Result<(), String> {
    match record {
        MetadataRecord::ElectLeader {
            id,
            partition,
            leader,
            isr,
        } => {
            let a = assignment_mut(c, id, *partition)?;
            let isr = isr.clone().unwrap_or_else(|| a.isr.clone());
            if !isr.contains(leader) || isr.iter().any(|n| !a.replicas.contains(n)) {
                return Err(format!("leader {leader} outside in-sync set {isr:?}"));
            }
            a.leader = *leader;
            a.leader_epoch += 1;
            a.isr = isr;
        }
        MetadataRecord::SetAssignment {
            id,
            partition,
            epoch,
            assignment,
        } => {
            let within = |v: &[i32]| v.iter().all(|n| assignment.replicas.contains(n));
            let led = assignment.leader == -1 || assignment.isr.contains(&assignment.leader);
            let valid = !assignment.isr.is_empty()
                && led
                && within(&assignment.isr)
                && within(&assignment.adding)
                && within(&assignment.removing);
            if !valid {
                return Err(format!("inconsistent assignment {assignment:?}"));
            }
            let a = assignment_mut(c, id, *partition)?;
            if a.leader_epoch == *epoch {
                *a = assignment.clone();
            }
        }
        MetadataRecord::ChangeIsr {
            id,
            partition,
            epoch,
            isr,
        } => set_isr(assignment_mut(c, id, *partition)?, *epoch, None, isr)?,
        MetadataRecord::AlterIsr {
            id,
            partition,
            epoch,
            from,
            isr,
        } => set_isr(assignment_mut(c, id, *partition)?, *epoch, Some(from), isr)?,
        _ => unreachable!("not a partition record"),
    }
    Ok(())
}

/// An in-sync set change: only in `epoch`, and (given `from`) only from that set.
fn set_isr(
    a: &mut PartitionAssignment,
    epoch: i32,
    from: Option<&[i32]>,
    isr: &[i32],
) -> Result<(), String> {
    let moved = from.is_some_and(|f| !crate::partition::commit::same_set(&a.isr, f));
    if a.leader_epoch != epoch || moved {
        return Ok(());
    }
    if isr.is_empty() || isr.iter().any(|n| !a.replicas.contains(n)) {
        return Err(format!(
            "in-sync set {isr:?} outside replicas {:?}",
            a.replicas
        ));
    }
    a.isr = isr.to_vec();
    Ok(())
}

fn topic_mut<'a>(c: &'a mut CatalogRecord, id: &[u8; 16]) -> Result<&'a mut TopicRecord, String> {
    c.topics
        .iter_mut()
        .find(|t| t.id == *id)
        .ok_or_else(|| "no topic with that id".to_string())
}

fn assignment_mut<'a>(
    c: &'a mut CatalogRecord,
    id: &[u8; 16],
    partition: i32,
) -> Result<&'a mut PartitionAssignment, String> {
    let t = topic_mut(c, id)?;
    let name = t.name.clone();
    usize::try_from(partition)
        .ok()
        .and_then(|p| t.assignment.get_mut(p))
        .ok_or_else(|| format!("topic {name} has no partition {partition}"))
}

/// A broker (re)registers: its record replaced, unfenced, and leaderless partitions it holds in
/// sync led by it again (a new leader epoch); where the topic allows unclean elections, also
/// leaderless partitions it holds out of sync.
fn register(c: &mut CatalogRecord, b: &BrokerRecord) {
    // A new incarnation of a broker whose registration is live restarted before its session
    // expired: the old incarnation is fenced first, so each partition it led gets a new leader
    // epoch (another in-sync replica, or itself again below when it was the last). Its log may
    // have lost an unsynced tail that followers had already copied; a new epoch makes them cut
    // it (KIP-279), where the same epoch let them keep records the leader no longer had.
    let restarted = c
        .brokers
        .iter()
        .find(|x| x.node_id == b.node_id && !x.fenced && x.incarnation != b.incarnation)
        .map(|x| x.incarnation);
    if let Some(old) = restarted {
        if !crate::inject::active(crate::inject::Bug::RestartKeepsLeaderEpoch) {
            fence(c, b.node_id, old);
        }
    }
    let mut b = b.clone();
    b.fenced = false;
    match c.brokers.iter_mut().find(|x| x.node_id == b.node_id) {
        Some(x) => *x = b.clone(),
        None => {
            c.brokers.push(b.clone());
            c.brokers.sort_by_key(|x| x.node_id);
        }
    }
    let cluster_unclean = unclean_allowed(scope_configs(&c.broker_configs, ""));
    for t in c.topics.iter_mut() {
        let unclean = unclean_allowed(&t.configs).unwrap_or(cluster_unclean.unwrap_or(false));
        for a in t.assignment.iter_mut().filter(|a| a.leader == -1) {
            if a.isr.contains(&b.node_id) {
                a.leader = b.node_id;
                a.leader_epoch += 1;
            } else if unclean && a.replicas.contains(&b.node_id) {
                // No in-sync replica is back; the topic prefers availability.
                a.leader = b.node_id;
                a.leader_epoch += 1;
                a.isr = vec![b.node_id];
            }
        }
    }
}

/// A broker is fenced: each partition it leads moves to another live in-sync replica, or has
/// no leader (a new epoch either way). The ISR keeps its last member, so the partition's data
/// is not declared lost.
fn fence(c: &mut CatalogRecord, node_id: i32, incarnation: u64) {
    let Some(b) = c.brokers.iter_mut().find(|b| b.node_id == node_id) else {
        return;
    };
    if b.incarnation != incarnation {
        // An older incarnation's session ended after the broker restarted: nothing to do.
        return;
    }
    b.fenced = true;
    settle_fenced(c);
}

/// No partition is led by a fenced broker, or holds one in an in-sync set of several: each
/// leaves the in-sync sets it shares, and each partition it led gets a new epoch, led by a
/// live in-sync replica (or, where the topic allows unclean elections, any live replica), or
/// by nobody. Applied after a fence, and after every record that assigns leaders: the
/// controller checks liveness when it proposes, and a fence may commit in between (the
/// simulator found a topic created with a leader fenced meanwhile, which then led the same
/// epoch again after a restart that had lost its tail).
fn settle_fenced(c: &mut CatalogRecord) {
    if c.brokers.is_empty() {
        return; // a single node
    }
    let live: Vec<i32> = c
        .brokers
        .iter()
        .filter(|b| !b.fenced)
        .map(|b| b.node_id)
        .collect();
    let cluster_unclean = unclean_allowed(scope_configs(&c.broker_configs, ""));
    for t in c.topics.iter_mut() {
        let unclean = unclean_allowed(&t.configs).unwrap_or(cluster_unclean.unwrap_or(false));
        for a in t.assignment.iter_mut() {
            if a.isr.len() > 1 {
                let first_live = a.isr.iter().copied().find(|n| live.contains(n));
                a.isr.retain(|n| live.contains(n));
                if a.isr.is_empty() {
                    // Kept: the last member holds the data.
                    a.isr
                        .extend(first_live.or(Some(a.leader)).filter(|n| *n >= 0));
                }
            }
            if a.leader >= 0 && !live.contains(&a.leader) {
                elect_without_leader(a, &live, unclean);
            }
        }
    }
}

/// A new epoch for a partition whose leader cannot lead.
fn elect_without_leader(a: &mut PartitionAssignment, live: &[i32], unclean: bool) {
    a.leader_epoch += 1;
    let candidates = if crate::inject::active(crate::inject::Bug::ElectOutOfSyncReplica) {
        &a.replicas
    } else {
        &a.isr
    };
    a.leader = candidates
        .iter()
        .copied()
        .find(|n| live.contains(n))
        .unwrap_or(-1);
    if a.leader == -1 && unclean {
        // The topic allows an unclean election: a live replica that may lack records.
        if let Some(n) = a.replicas.iter().copied().find(|n| live.contains(n)) {
            a.leader = n;
            a.isr = vec![n];
        }
    }
}

/// `unclean.leader.election.enable` among these overrides, if set.
fn unclean_allowed(configs: &[(String, String)]) -> Option<bool> {
    configs
        .iter()
        .find(|(k, _)| k == UNCLEAN_LEADER_ELECTION)
        .map(|(_, v)| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The archived size of a record since format version 1 (SetAssignment's).
    const ARCHIVED_RECORD_BYTES: usize = 72;

    /// Broker `id`'s registration, as a node writes it.
    fn broker(id: i32, incarnation: u64) -> MetadataRecord {
        MetadataRecord::RegisterBroker(Box::new(BrokerRecord {
            node_id: id,
            incarnation,
            listeners: vec![crate::storage::catalog::EndpointRecord {
                name: "internal".into(),
                host: "127.0.0.1".into(),
                port: 9000 + id,
                security_protocol: 3,
            }],
            rack: None,
            fenced: false,
        }))
    }

    fn topic(name: &str, id: u8, leaders: &[i32]) -> TopicRecord {
        TopicRecord {
            name: name.into(),
            id: [id; 16],
            partitions: leaders.len() as u32,
            configs: Vec::new(),
            assignment: leaders
                .iter()
                .map(|&l| PartitionAssignment {
                    replicas: vec![l, l % 3 + 1],
                    leader: l,
                    leader_epoch: 0,
                    isr: vec![l],
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn empty() -> CatalogRecord {
        CatalogRecord {
            cluster_id: String::new(),
            topics: Vec::new(),
            producer_id_block_end: 0,
            broker_configs: Vec::new(),
            brokers: Vec::new(),
            ..CatalogRecord::default()
        }
    }

    #[test]
    fn archived_size_is_stable() {
        // An entry is an array of archived records, each the size of the largest variant: a
        // variant larger than this would move every record of entries already written.
        assert_eq!(
            std::mem::size_of::<ArchivedMetadataRecord>(),
            ARCHIVED_RECORD_BYTES
        );
    }

    #[test]
    fn credentials_and_acls_apply_and_round_trip() {
        let cred = ScramCredentialRecord {
            user: "alice".into(),
            mechanism: 2,
            salt: vec![1; 16],
            iterations: 4096,
            stored_key: vec![2; 64],
            server_key: vec![3; 64],
        };
        let acl = AclRecord {
            resource_type: 2,
            name: "logs".into(),
            pattern: 4,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: 4,
            permission: 3,
        };
        let records = vec![
            MetadataRecord::SetScramCredential(Box::new(cred.clone())),
            MetadataRecord::CreateAcl(Box::new(acl.clone())),
            MetadataRecord::CreateAcl(Box::new(acl.clone())),
        ];
        assert_eq!(decode(&encode(&records)), Ok(records.clone()));
        let mut c = empty();
        apply(&mut c, &records).unwrap();
        assert_eq!(
            (c.scram_credentials.clone(), c.acls.clone()),
            (vec![cred], vec![acl.clone()])
        );
        let gone = MetadataRecord::DeleteScramCredential(Box::new(("alice".into(), 1)));
        assert!(
            apply(&mut c, std::slice::from_ref(&gone)).is_err(),
            "no SHA-256 credential"
        );
        let gone = MetadataRecord::DeleteScramCredential(Box::new(("alice".into(), 2)));
        apply(&mut c, &[gone, MetadataRecord::DeleteAcl(Box::new(acl))]).unwrap();
        assert!(c.scram_credentials.is_empty() && c.acls.is_empty());
    }

    #[test]
    fn entries_round_trip_and_bad_bytes_are_refused() {
        let records = vec![
            MetadataRecord::ClusterId("abc".into()),
            broker(1, 7),
            MetadataRecord::CreateTopic(topic("t", 1, &[1, 2])),
            MetadataRecord::ProducerIdBlock { end: 1000 },
        ];
        let bytes = encode(&records);
        assert_eq!(decode(&bytes), Ok(records));
        // A registration from before listener lists applies as one PLAINTEXT listener.
        let mut c = empty();
        let old = crate::storage::catalog::BrokerRecordV1 {
            node_id: 4,
            incarnation: 1,
            host: "h".into(),
            port: 9,
            rack: None,
            fenced: false,
        };
        apply(&mut c, &[MetadataRecord::RegisterBrokerV1(old)]).unwrap();
        let endpoint = c.brokers[0].endpoint("PLAINTEXT").unwrap();
        assert_eq!((endpoint.host.as_str(), endpoint.port), ("h", 9));
        assert!(decode(&[]).is_err());
        assert!(decode(&[2, 0, 0]).unwrap_err().contains("version 2"));
        assert!(decode(&bytes[..bytes.len() - 3]).is_err());
    }

    #[test]
    fn fencing_moves_leadership_and_registering_restores_it() {
        let mut c = empty();
        let setup = [
            broker(1, 1),
            broker(2, 1),
            MetadataRecord::CreateTopic(topic("t", 1, &[1, 2])),
        ];
        apply(&mut c, &setup).unwrap();
        // An old incarnation's expiry does nothing.
        apply(
            &mut c,
            &[MetadataRecord::FenceBroker {
                node_id: 1,
                incarnation: 0,
            }],
        )
        .unwrap();
        assert!(!c.brokers[0].fenced);
        let fence = MetadataRecord::FenceBroker {
            node_id: 1,
            incarnation: 1,
        };
        apply(&mut c, &[fence]).unwrap();
        assert!(c.brokers[0].fenced);
        let p0 = &c.topics[0].assignment[0];
        assert_eq!((p0.leader, p0.leader_epoch, &p0.isr[..]), (-1, 1, &[1][..]));
        assert_eq!(c.topics[0].assignment[1].leader, 2, "other leaders stay");
        apply(&mut c, &[broker(1, 2)]).unwrap();
        let p0 = &c.topics[0].assignment[0];
        assert_eq!((p0.leader, p0.leader_epoch), (1, 2));
        assert!(!c.brokers[0].fenced);
        assert_eq!(c.brokers[0].incarnation, 2);
    }

    #[test]
    fn fencing_the_last_in_sync_replica_elects_another_only_where_unclean_is_allowed() {
        let mut c = empty();
        let mut strict = topic("strict", 1, &[1]);
        let mut loose = topic("loose", 2, &[1]);
        loose.configs = vec![(UNCLEAN_LEADER_ELECTION.into(), "true".into())];
        for t in [&mut strict, &mut loose] {
            t.assignment[0].isr = vec![1];
        }
        let setup = [
            broker(1, 1),
            broker(2, 1),
            MetadataRecord::CreateTopic(strict),
            MetadataRecord::CreateTopic(loose),
        ];
        apply(&mut c, &setup).unwrap();
        let fence = MetadataRecord::FenceBroker {
            node_id: 1,
            incarnation: 1,
        };
        apply(&mut c, &[fence]).unwrap();
        let (s, l) = (&c.topics[0].assignment[0], &c.topics[1].assignment[0]);
        assert_eq!(
            (s.leader, &s.isr[..]),
            (-1, &[1][..]),
            "no leader without its data"
        );
        assert_eq!((l.leader, &l.isr[..], l.leader_epoch), (2, &[2][..], 1));
    }

    #[test]
    fn a_failing_record_leaves_the_catalog_unchanged() {
        let mut c = empty();
        apply(&mut c, &[MetadataRecord::CreateTopic(topic("t", 1, &[1]))]).unwrap();
        let before = c.clone();
        let bad = [
            MetadataRecord::ProducerIdBlock { end: 5 },
            MetadataRecord::CreateTopic(topic("t", 2, &[1])),
        ];
        assert!(apply(&mut c, &bad).is_err());
        assert_eq!(c, before);
        let grow = MetadataRecord::CreatePartitions {
            id: [1; 16],
            count: 1,
            added: Vec::new(),
        };
        assert!(apply(&mut c, &[grow]).is_err());
        assert!(apply(&mut c, &[MetadataRecord::DeleteTopic { id: [9; 16] }]).is_err());
        apply(&mut c, &[MetadataRecord::DeleteTopic { id: [1; 16] }]).unwrap();
        assert!(c.topics.is_empty());
    }

    /// Entries written before `AlterIsr` existed still decode (the new variant fits the
    /// archived layout): these bytes were written by the previous version.
    #[test]
    fn entries_of_the_previous_layout_still_decode() {
        let hex = "0102000000030000000100000002000000030000000200000003000000010000000b070707070707070707070707070707070000000100000005000000c4ffffff020000000000000000000000000000000000000000000000000000000000000000000000000000000a07070707070707070707070707070707000000000000000400000084ffffff03000000020000000500000080ffffff0200000080ffffff0000000078ffffff0000000000000000020000000300000063000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000090808080808080808080808080808080800000002000000010000000100000004ffffff010000000000000000000000000000000000000000000000000000000000000000000000e0feffff04000000";
        let raw: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let a = PartitionAssignment {
            replicas: vec![1, 2, 3],
            leader: 2,
            leader_epoch: 5,
            isr: vec![2, 3],
            adding: vec![],
            removing: vec![],
        };
        let want = vec![
            MetadataRecord::ChangeIsr {
                id: [7; 16],
                partition: 1,
                epoch: 5,
                isr: vec![2, 3],
            },
            MetadataRecord::SetAssignment {
                id: [7; 16],
                partition: 0,
                epoch: 4,
                assignment: a,
            },
            MetadataRecord::FenceBroker {
                node_id: 3,
                incarnation: 99,
            },
            MetadataRecord::ElectLeader {
                id: [8; 16],
                partition: 2,
                leader: 1,
                isr: Some(vec![1]),
            },
        ];
        assert_eq!(decode(&raw).unwrap(), want);
    }

    #[test]
    fn partition_epochs_count_every_change_from_level_2_and_guard_isr_changes() {
        let mut c = empty();
        apply(&mut c, &[broker(1, 1), broker(2, 1)]).unwrap();
        let mut t = topic("t", 1, &[1, 2]);
        t.assignment[0].isr = vec![1, 2];
        apply(&mut c, &[MetadataRecord::CreateTopic(t)]).unwrap();
        assert!(c.partition_epochs.is_empty(), "level 1 keeps none");
        apply(&mut c, &bootstrap("c".into())[1..]).unwrap();
        assert_eq!(c.metadata_version, 2);
        assert_eq!(partition_epoch(&c, &[1; 16], 1), Some(0));
        // A fence moves partition 0's leadership from 1 to 2: only its epoch moves.
        let fence = MetadataRecord::FenceBroker {
            node_id: 1,
            incarnation: 1,
        };
        apply(&mut c, &[fence]).unwrap();
        assert_eq!(c.partition_epochs[0].epochs, vec![1, 0]);
        let change = |partition_epoch, isr: Vec<i32>| {
            MetadataRecord::AlterPartition(Box::new(PartitionChange {
                id: [1; 16],
                partition: 0,
                partition_epoch,
                isr,
            }))
        };
        // Computed at epoch 0, before the fence: it changes nothing.
        apply(&mut c, &[change(0, vec![2, 1])]).unwrap();
        assert_eq!(c.topics[0].assignment[0].isr, vec![2]);
        assert_eq!(c.partition_epochs[0].epochs, vec![1, 0]);
        apply(&mut c, &[broker(1, 2)]).unwrap();
        apply(&mut c, &[change(1, vec![2, 1])]).unwrap();
        assert_eq!(c.topics[0].assignment[0].isr, vec![2, 1]);
        assert_eq!(c.partition_epochs[0].epochs, vec![2, 0]);
        // A level is never lowered, and an unknown feature is refused.
        let lower =
            MetadataRecord::SetFeatureLevel(Box::new((features::METADATA_VERSION.into(), 1)));
        assert!(apply(&mut c, &[lower]).is_err());
        let other = MetadataRecord::SetFeatureLevel(Box::new(("kraft.version".into(), 2)));
        assert!(apply(&mut c, &[other]).is_err());
        // A level beyond this binary stops the node, by name.
        let newer =
            MetadataRecord::SetFeatureLevel(Box::new((features::METADATA_VERSION.into(), 3)));
        assert!(check_level(&[newer]).unwrap_err().contains("runs up to 2"));
        assert_eq!(check_level(&bootstrap("c".into())), Ok(()));
    }

    #[test]
    fn an_isr_change_applies_only_from_the_set_it_was_computed_from() {
        let mut a = PartitionAssignment {
            replicas: vec![1, 2, 3],
            leader: 1,
            leader_epoch: 2,
            isr: vec![1],
            adding: vec![],
            removing: vec![],
        };
        // Found by the simulator: computed from [1, 2], a fence of 2 committed first.
        set_isr(&mut a, 2, Some(&[1, 2]), &[1, 2, 3]).unwrap();
        assert_eq!(a.isr, vec![1]);
        set_isr(&mut a, 2, Some(&[1]), &[1, 3]).unwrap();
        assert_eq!(a.isr, vec![1, 3]);
        set_isr(&mut a, 1, Some(&[1, 3]), &[1]).unwrap();
        assert_eq!(a.isr, vec![1, 3], "another epoch");
    }

    #[test]
    fn a_partition_assigned_to_a_fenced_leader_is_led_by_a_live_replica() {
        // Found by the simulator: the controller placed a topic on a live broker, whose
        // fence committed before the topic; the partition kept a fenced leader, which led
        // its epoch again after a restart that had lost the tail its followers copied.
        let mut c = empty();
        let setup = [
            broker(1, 1),
            broker(2, 1),
            MetadataRecord::FenceBroker {
                node_id: 1,
                incarnation: 1,
            },
        ];
        apply(&mut c, &setup).unwrap();
        let mut t = topic("t", 1, &[1]);
        t.assignment[0].isr = vec![1, 2];
        apply(&mut c, &[MetadataRecord::CreateTopic(t)]).unwrap();
        let p0 = &c.topics[0].assignment[0];
        assert_eq!((p0.leader, p0.leader_epoch, &p0.isr[..]), (2, 1, &[2][..]));
        // With no live in-sync replica: no leader, and the set keeps its last member.
        let mut u = topic("u", 2, &[1]);
        u.assignment[0].isr = vec![1];
        apply(&mut c, &[MetadataRecord::CreateTopic(u)]).unwrap();
        let p0 = &c.topics[1].assignment[0];
        assert_eq!((p0.leader, p0.leader_epoch, &p0.isr[..]), (-1, 1, &[1][..]));
    }
}
