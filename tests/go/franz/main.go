// franz-go (kgo and kadm) against a broker, as an application uses it: each command runs one
// client's part and prints what it saw as one JSON object (tests/integration/test_go_clients.py
// asserts on it).
//
//	franz produce BOOTSTRAP TOPIC COUNT
//	franz group BOOTSTRAP TOPIC GROUP COUNT
//	franz transact BOOTSTRAP IN OUT GROUP COUNT
//	franz admin BOOTSTRAP TOPIC GROUP
package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"sluice.dev/tests/go/internal/cmd"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd.Run("franz", map[string]func([]string) (any, error){
		"produce":  func(a []string) (any, error) { return produce(ctx, a[0], a[1], cmd.Atoi(a[2])) },
		"group":    func(a []string) (any, error) { return group(ctx, a[0], a[1], a[2], cmd.Atoi(a[3])) },
		"transact": func(a []string) (any, error) { return transact(ctx, a[0], a[1], a[2], a[3], cmd.Atoi(a[4])) },
		"admin":    func(a []string) (any, error) { return admin(ctx, a[0], a[1], a[2]) },
	})
}

func seeds(bootstrap string) kgo.Opt { return kgo.SeedBrokers(strings.Split(bootstrap, ",")...) }

// An idempotent acks=all producer (franz-go's default): COUNT records keyed k<i>, each
// acknowledged (key, partition, offset).
func produce(ctx context.Context, bootstrap, topic string, count int) (any, error) {
	cl, err := kgo.NewClient(seeds(bootstrap), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	records := make([]*kgo.Record, count)
	for i := range records {
		records[i] = &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))}
	}
	results := cl.ProduceSync(ctx, records...)
	if err := results.FirstErr(); err != nil {
		return nil, err
	}
	acked := make([][]any, 0, count)
	for _, r := range results {
		acked = append(acked, []any{string(r.Record.Key), r.Record.Partition, r.Record.Offset})
	}
	return map[string]any{"acked": acked}, nil
}

// A consumer group member (the classic protocol: Sluice does not advertise KIP-848's APIs) that
// reads COUNT records of TOPIC read_committed, committing as it goes: what it read and the
// group's committed offsets and lag afterwards.
func group(ctx context.Context, bootstrap, topic, groupID string, count int) (any, error) {
	cl, err := kgo.NewClient(seeds(bootstrap), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	var read [][]any
	for len(read) < count {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			cl.Close()
			return nil, fmt.Errorf("read %d of %d: %w", len(read), count, err)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			cl.Close()
			return nil, fmt.Errorf("fetch: %v", errs[0].Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			read = append(read, []any{string(r.Key), string(r.Value), r.Partition, r.Offset})
		})
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			cl.Close()
			return nil, err
		}
	}
	cl.Close()
	committed, lag, err := groupState(ctx, bootstrap, groupID)
	if err != nil {
		return nil, err
	}
	return map[string]any{"read": read, "committed": committed, "lag": lag}, nil
}

func groupState(ctx context.Context, bootstrap, groupID string) (map[string]int64, int64, error) {
	cl, err := kgo.NewClient(seeds(bootstrap))
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	offsets, err := adm.FetchOffsets(ctx, groupID)
	if err != nil {
		return nil, 0, err
	}
	committed := map[string]int64{}
	offsets.Each(func(o kadm.OffsetResponse) {
		committed[fmt.Sprintf("%s-%d", o.Topic, o.Partition)] = o.At
	})
	lags, err := adm.Lag(ctx, groupID)
	if err != nil {
		return nil, 0, err
	}
	l := lags[groupID]
	if err := l.Error(); err != nil {
		return nil, 0, err
	}
	return committed, l.Lag.Total(), nil
}

// Exactly once with GroupTransactSession: reads IN in a group and writes each record's value
// upper-cased to OUT, offsets committed in the same transaction, until COUNT records.
func transact(ctx context.Context, bootstrap, in, out, groupID string, count int) (any, error) {
	sess, err := kgo.NewGroupTransactSession(seeds(bootstrap), kgo.TransactionalID(groupID+"-txn"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RequireStableFetchOffsets(),
		kgo.DefaultProduceTopic(out))
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	done, transactions := 0, 0
	for done < count {
		fetches := sess.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("transformed %d of %d: %w", done, count, err)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return nil, fmt.Errorf("fetch: %v", errs[0].Err)
		}
		if fetches.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return nil, err
		}
		var produceErr error
		n := 0
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			upper := &kgo.Record{Key: r.Key, Value: []byte(strings.ToUpper(string(r.Value)))}
			sess.Produce(ctx, upper, func(_ *kgo.Record, err error) {
				if err != nil {
					produceErr = err
				}
			})
		})
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			return nil, err
		}
		if committed && produceErr == nil {
			done += n
			transactions++
		}
	}
	return map[string]any{"transformed": done, "transactions": transactions}, nil
}

// kadm's calls: create (with a config), list and describe topics, alter and describe a topic
// config, add partitions, list start and end offsets, the brokers, groups and their offsets,
// delete a group's offsets commit, delete the topic.
func admin(ctx context.Context, bootstrap, topic, groupID string) (any, error) {
	cl, err := kgo.NewClient(seeds(bootstrap))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	out := map[string]any{}
	retention := "3600000"
	created, err := adm.CreateTopics(ctx, 2, -1, map[string]*string{"retention.ms": &retention}, topic)
	if err != nil {
		return nil, err
	}
	if err := created.Error(); err != nil {
		return nil, err
	}
	again, _ := adm.CreateTopics(ctx, 2, -1, nil, topic)
	out["create_again"] = fmt.Sprint(again.Error())
	meta, err := adm.Metadata(ctx)
	if err != nil {
		return nil, err
	}
	var brokers []int32
	for _, b := range meta.Brokers {
		brokers = append(brokers, b.NodeID)
	}
	sort.Slice(brokers, func(i, j int) bool { return brokers[i] < brokers[j] })
	out["brokers"] = brokers
	out["cluster_id"] = meta.Cluster
	if err := describeTopic(ctx, adm, topic, out, "before"); err != nil {
		return nil, err
	}
	segment := "1048576"
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "segment.bytes", Value: &segment}}, topic)
	if err == nil {
		_, err = altered.On(topic, nil)
	}
	if err != nil {
		return nil, err
	}
	if _, err := adm.CreatePartitions(ctx, 1, topic); err != nil {
		return nil, err
	}
	if err := describeTopic(ctx, adm, topic, out, "after"); err != nil {
		return nil, err
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, err
	}
	out["groups"] = groups.Groups()
	if groupID != "" {
		described, err := adm.DescribeGroups(ctx, groupID)
		if err != nil {
			return nil, err
		}
		out["group_state"] = described[groupID].State
	}
	deleted, err := adm.DeleteTopics(ctx, topic)
	if err == nil {
		err = deleted.Error()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func describeTopic(ctx context.Context, adm *kadm.Client, topic string, out map[string]any, when string) error {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return err
	}
	d := details[topic]
	if d.Err != nil {
		return d.Err
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return err
	}
	c, err := configs.On(topic, nil)
	if err != nil {
		return err
	}
	set := map[string]string{}
	for _, kv := range c.Configs {
		if kv.Value != nil && kv.Source.String() == "DYNAMIC_TOPIC_CONFIG" {
			set[kv.Key] = *kv.Value
		}
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	endOffsets := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { endOffsets[strconv.Itoa(int(o.Partition))] = o.Offset })
	out[when] = map[string]any{"partitions": len(d.Partitions), "configs": set, "end_offsets": endOffsets,
		"has_id": d.ID != [16]byte{}}
	return nil
}
