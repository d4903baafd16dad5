//! Per-partition entries nested under their topics, as Kafka's messages carry them.

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

/// (topic, entry) pairs grouped by topic in the order given: consecutive entries of one topic
/// share one topic entry.
pub fn group_by_topic<T: AsRef<str>, E>(
    items: impl IntoIterator<Item = (T, E)>,
) -> Vec<(TopicName, Vec<E>)> {
    let mut out: Vec<(T, Vec<E>)> = Vec::new();
    for (topic, entry) in items {
        match out.last_mut() {
            Some((t, entries)) if t.as_ref() == topic.as_ref() => entries.push(entry),
            _ => out.push((topic, vec![entry])),
        }
    }
    out.into_iter()
        .map(|(t, entries)| {
            (
                TopicName(StrBytes::from_string(t.as_ref().to_string())),
                entries,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_entries_of_a_topic_share_one_topic_entry() {
        let grouped = group_by_topic([("a", 0), ("a", 1), ("b", 0), ("a", 2)]);
        let names: Vec<(&str, Vec<i32>)> = grouped
            .iter()
            .map(|(t, e)| (t.0.as_str(), e.clone()))
            .collect();
        assert_eq!(
            names,
            vec![("a", vec![0, 1]), ("b", vec![0]), ("a", vec![2])]
        );
    }
}
