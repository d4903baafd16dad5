// sarama (IBM/sarama) against a broker, as an application uses it: each command prints what it
// saw as one JSON object (tests/integration/test_go_clients.py asserts on it).
//
//	saramacheck produce BOOTSTRAP TOPIC COUNT
//	saramacheck group BOOTSTRAP TOPIC GROUP COUNT
//	saramacheck admin BOOTSTRAP TOPIC
package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"sluice.dev/tests/go/internal/cmd"

	"github.com/IBM/sarama"
)

func main() {
	cmd.Run("saramacheck", map[string]func([]string) (any, error){
		"produce": func(a []string) (any, error) { return produce(a[0], a[1], cmd.Atoi(a[2])) },
		"group":   func(a []string) (any, error) { return group(a[0], a[1], a[2], cmd.Atoi(a[3])) },
		"admin":   func(a []string) (any, error) { return admin(a[0], a[1]) },
	})
}

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0
	c.ClientID = "saramacheck"
	return c
}

// An idempotent acks=all SyncProducer (sarama's idempotence needs one request in flight):
// COUNT records keyed k<i>, each acknowledged (key, partition, offset).
func produce(bootstrap, topic string, count int) (any, error) {
	c := config()
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Idempotent = true
	c.Producer.Return.Successes = true
	c.Net.MaxOpenRequests = 1
	c.Producer.Partitioner = sarama.NewHashPartitioner
	p, err := sarama.NewSyncProducer(strings.Split(bootstrap, ","), c)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	acked := make([][]any, 0, count)
	for i := 0; i < count; i++ {
		key := fmt.Sprintf("k%d", i)
		partition, offset, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic,
			Key: sarama.StringEncoder(key), Value: sarama.StringEncoder(fmt.Sprintf("v%d", i))})
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		acked = append(acked, []any{key, partition, offset})
	}
	return map[string]any{"acked": acked}, nil
}

type handler struct {
	mu    sync.Mutex
	read  [][]any
	count int
	done  chan struct{}
	once  sync.Once
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.mu.Lock()
		h.read = append(h.read, []any{string(m.Key), string(m.Value), m.Partition, m.Offset})
		n := len(h.read)
		h.mu.Unlock()
		s.MarkMessage(m, "")
		if n >= h.count {
			s.Commit()
			h.once.Do(func() { close(h.done) })
		}
	}
	return nil
}

// A consumer group member reading COUNT records of TOPIC from the start, marking and
// committing them: what it read, and the group's committed offsets afterwards.
func group(bootstrap, topic, groupID string, count int) (any, error) {
	c := config()
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	brokers := strings.Split(bootstrap, ",")
	g, err := sarama.NewConsumerGroup(brokers, groupID, c)
	if err != nil {
		return nil, err
	}
	h := &handler{count: count, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := g.Consume(ctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				errs <- err
				return
			}
		}
	}()
	select {
	case <-h.done:
	case err := <-errs:
		return nil, err
	case <-ctx.Done():
		return nil, fmt.Errorf("read %d of %d records", len(h.read), count)
	}
	cancel()
	if err := g.Close(); err != nil {
		return nil, err
	}
	adm, err := sarama.NewClusterAdmin(brokers, config())
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	offsets, err := adm.ListConsumerGroupOffsets(groupID, nil)
	if err != nil {
		return nil, err
	}
	committed := map[string]int64{}
	for t, partitions := range offsets.Blocks {
		for p, b := range partitions {
			committed[fmt.Sprintf("%s-%d", t, p)] = b.Offset
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return map[string]any{"read": h.read, "committed": committed}, nil
}

// ClusterAdmin's basics: create a topic with a config, list and describe it, describe and
// alter its config, add partitions, list groups, delete the topic.
func admin(bootstrap, topic string) (any, error) {
	adm, err := sarama.NewClusterAdmin(strings.Split(bootstrap, ","), config())
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	out := map[string]any{}
	retention := "3600000"
	detail := &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: -1,
		ConfigEntries: map[string]*string{"retention.ms": &retention}}
	if err := adm.CreateTopic(topic, detail, false); err != nil {
		return nil, err
	}
	out["create_again"] = fmt.Sprint(adm.CreateTopic(topic, detail, false))
	brokers, controller, err := adm.DescribeCluster()
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, b := range brokers {
		ids = append(ids, b.ID())
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out["brokers"], out["controller"] = ids, controller
	segment := "1048576"
	if err := adm.AlterConfig(sarama.TopicResource, topic, map[string]*string{"segment.bytes": &segment,
		"retention.ms": &retention}, false); err != nil {
		return nil, err
	}
	if err := adm.CreatePartitions(topic, 3, nil, false); err != nil {
		return nil, err
	}
	topics, err := adm.ListTopics()
	if err != nil {
		return nil, err
	}
	out["listed_partitions"] = topics[topic].NumPartitions
	described, err := adm.DescribeTopics([]string{topic})
	if err != nil {
		return nil, err
	}
	out["described_partitions"] = len(described[0].Partitions)
	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	if err != nil {
		return nil, err
	}
	set := map[string]string{}
	for _, e := range entries {
		if e.Source == sarama.SourceTopic {
			set[e.Name] = e.Value
		}
	}
	out["configs"] = set
	groups, err := adm.ListConsumerGroups()
	if err != nil {
		return nil, err
	}
	out["groups"] = len(groups)
	if err := adm.DeleteTopic(topic); err != nil {
		return nil, err
	}
	return out, nil
}
