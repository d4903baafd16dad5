// Kafka 4.4's Java clients against a broker, as an application uses them: each subcommand runs
// one client's part and prints what it saw as one JSON object on stdout (the Python test in
// tests/integration/test_java_clients.py asserts on it). Run with Java's single-file launcher
// and the jars of tests/kafka/libs:
//
//     java -cp 'tests/kafka/libs/*' tests/java/JavaClients.java produce BOOTSTRAP TOPIC COUNT
import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.*;

public class JavaClients {
    static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        Map<String, Object> out = switch (args[0]) {
            case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]));
            case "transactions" -> transactions(args[1], args[2], args[3]);
            case "group" -> group(args[1], args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]));
            case "admin" -> admin(args[1], args[2], args[3]);
            case "fence" -> fence(args[1], args[2], args[3]);
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        };
        System.out.println(JSON.writeValueAsString(out));
    }

    static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        Properties p = common(bootstrap);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("linger.ms", "5");
        p.put("delivery.timeout.ms", "60000");
        if (transactionalId != null) {
            p.put("transactional.id", transactionalId);
        }
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    /** An idempotent acks=all producer: COUNT records keyed k<i>; each acknowledged offset. */
    static Map<String, Object> produce(String bootstrap, String topic, int count) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = producer(bootstrap, null)) {
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)));
            }
            producer.flush();
            List<List<Object>> acked = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                RecordMetadata m = sent.get(i).get(60, TimeUnit.SECONDS);
                acked.add(List.of("k" + i, m.partition(), m.offset()));
            }
            out.put("acked", acked);
        }
        return out;
    }

    /**
     * A transactional producer (transaction version 2 when the broker finalises it, the Java 4.x
     * default): a committed transaction of 10 records, an aborted one of 5, a committed one of 3.
     */
    static Map<String, Object> transactions(String bootstrap, String topic, String id) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<String, String> producer = producer(bootstrap, id)) {
            producer.initTransactions();
            int[][] runs = {{10, 1}, {5, 0}, {3, 1}};
            int n = 0;
            for (int[] run : runs) {
                producer.beginTransaction();
                for (int i = 0; i < run[0]; i++, n++) {
                    producer.send(new ProducerRecord<>(topic, 0, "t" + n, (run[1] == 1 ? "commit-" : "abort-") + n));
                }
                producer.flush();
                if (run[1] == 1) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
            }
            out.put("sent", n);
        }
        return out;
    }

    /**
     * MEMBERS consumers of one group (classic protocol) in threads, reading TOPIC until COUNT
     * records between them, each committing what it read: every record read, by whom, and the
     * group's committed offsets.
     */
    static Map<String, Object> group(String bootstrap, String topic, String groupId, int count, int members)
            throws Exception {
        ConcurrentLinkedQueue<List<Object>> read = new ConcurrentLinkedQueue<>();
        java.util.concurrent.atomic.AtomicInteger commitsFailed = new java.util.concurrent.atomic.AtomicInteger();
        ExecutorService pool = Executors.newFixedThreadPool(members);
        List<Future<?>> running = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 90_000;
        for (int m = 0; m < members; m++) {
            final int member = m;
            running.add(pool.submit(() -> {
                Properties p = common(bootstrap);
                p.put("group.id", groupId);
                p.put("auto.offset.reset", "earliest");
                p.put("enable.auto.commit", "false");
                p.put("isolation.level", "read_committed");
                try (KafkaConsumer<String, String> c =
                        new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
                    c.subscribe(List.of(topic));
                    while (read.size() < count && System.currentTimeMillis() < deadline) {
                        ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<String, String> r : records) {
                            read.add(List.of(member, r.key(), r.value(), r.partition(), r.offset()));
                        }
                        if (!records.isEmpty()) {
                            try {
                                c.commitSync();
                            } catch (CommitFailedException e) {
                                // The group rebalanced first: these records are read again by
                                // whoever gets their partition (at least once, as Kafka promises).
                                commitsFailed.incrementAndGet();
                            }
                        }
                    }
                }
                return null;
            }));
        }
        for (Future<?> f : running) {
            f.get();
        }
        pool.shutdown();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("read", new ArrayList<>(read));
        out.put("commits_failed", commitsFailed.get());
        try (Admin admin = Admin.create(common(bootstrap))) {
            Map<String, Long> committed = new TreeMap<>();
            admin.listConsumerGroupOffsets(groupId).partitionsToOffsetAndMetadata().get()
                    .forEach((tp, o) -> committed.put(tp.toString(), o.offset()));
            out.put("committed", committed);
        }
        return out;
    }

    /**
     * The AdminClient's calls the tools do not make: describeCluster, describeFeatures,
     * describeTopics by id, listOffsets at both isolation levels (TOPIC has an open transaction
     * of the caller's making), incrementalAlterConfigs, alterConsumerGroupOffsets and
     * deleteConsumerGroupOffsets (GROUP is empty), describeUserScramCredentials.
     */
    static Map<String, Object> admin(String bootstrap, String topic, String groupId) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Admin.create(common(bootstrap))) {
            DescribeClusterResult cluster = admin.describeCluster();
            List<Integer> nodes = new ArrayList<>();
            for (Node n : cluster.nodes().get()) {
                nodes.add(n.id());
            }
            Collections.sort(nodes);
            out.put("cluster", Map.of("id", cluster.clusterId().get(), "nodes", nodes,
                    "controller", cluster.controller().get().id()));
            FeatureMetadata features = admin.describeFeatures().featureMetadata().get();
            Map<String, Object> finalized = new TreeMap<>();
            features.finalizedFeatures().forEach((k, v) -> finalized.put(k, v.maxVersionLevel()));
            out.put("finalized_features", finalized);

            TopicDescription byName = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            TopicDescription byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(byName.topicId())))
                    .allTopicIds().get().get(byName.topicId());
            out.put("described_by_id", Map.of("name", byId.name(), "partitions", byId.partitions().size()));

            TopicPartition p0 = new TopicPartition(topic, 0);
            Map<String, Object> offsets = new LinkedHashMap<>();
            for (IsolationLevel level : IsolationLevel.values()) {
                ListOffsetsResult r = admin.listOffsets(Map.of(p0, OffsetSpec.latest()),
                        new ListOffsetsOptions(level));
                offsets.put(level.toString(), r.partitionResult(p0).get().offset());
            }
            offsets.put("earliest", admin.listOffsets(Map.of(p0, OffsetSpec.earliest())).partitionResult(p0).get()
                    .offset());
            out.put("list_offsets", offsets);

            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "123456789"), AlterConfigOp.OpType.SET))))
                    .all().get();
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            out.put("retention_ms", config.get("retention.ms").value());

            TopicPartition p1 = new TopicPartition(topic, 1);
            admin.alterConsumerGroupOffsets(groupId, Map.of(p0, new OffsetAndMetadata(2, "by-admin"),
                    p1, new OffsetAndMetadata(1))).all().get();
            Map<String, Object> committed = new TreeMap<>();
            admin.listConsumerGroupOffsets(groupId).partitionsToOffsetAndMetadata().get()
                    .forEach((tp, o) -> committed.put(tp.toString(), List.of(o.offset(), o.metadata())));
            out.put("altered_offsets", committed);
            admin.deleteConsumerGroupOffsets(groupId, Set.of(p1)).all().get();
            Map<String, Object> left = new TreeMap<>();
            admin.listConsumerGroupOffsets(groupId).partitionsToOffsetAndMetadata().get()
                    .forEach((tp, o) -> left.put(tp.toString(), o.offset()));
            out.put("offsets_after_delete", left);

            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion("java-user",
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "java-secret"))).all().get();
            UserScramCredentialsDescription user = admin.describeUserScramCredentials(List.of("java-user"))
                    .description("java-user").get();
            List<Object> credentials = new ArrayList<>();
            for (ScramCredentialInfo info : user.credentialInfos()) {
                credentials.add(List.of(info.mechanism().toString(), info.iterations()));
            }
            out.put("scram", credentials);
        }
        return out;
    }

    /**
     * fenceProducers: a transactional producer with a transaction open on TOPIC is fenced by
     * the AdminClient; its commit then fails with ProducerFencedException, and a read_committed
     * consumer sees none of the transaction.
     */
    static Map<String, Object> fence(String bootstrap, String topic, String id) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        KafkaProducer<String, String> producer = producer(bootstrap, id);
        try {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, "zombie", "never-committed")).get();
            try (Admin admin = Admin.create(common(bootstrap))) {
                admin.fenceProducers(List.of(id)).all().get();
            }
            try {
                producer.commitTransaction();
                out.put("commit", "succeeded");
            } catch (ProducerFencedException e) {
                out.put("commit", "ProducerFencedException");
            } catch (KafkaException e) {
                out.put("commit", e.getClass().getSimpleName() + ": " + e.getMessage());
            }
        } finally {
            producer.close(Duration.ofSeconds(5));
        }
        return out;
    }
}
