// Kafka Streams' word count with processing.guarantee=exactly_once_v2, one instance of an
// application (tests/integration/test_kafka_streams.py runs three and kills one): lines from
// INPUT are split into words, regrouped by word (a repartition topic), counted in a state store
// (its changelog a compacted topic) and each new count written to OUTPUT. Prints "RUNNING"
// each time the instance reaches that state, and "STATE <name>" for every other change.
//
//     java -cp 'tests/kafka/libs/*' tests/java/WordCount.java BOOTSTRAP APP INPUT OUTPUT STATE_DIR
import java.util.*;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

public class WordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], app = args[1], input = args[2], output = args[3], stateDir = args[4];
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        // Each instance leaves the group at once on a clean stop; a killed one is noticed within
        // its session timeout.
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10_000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1_000);
        p.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 10_000);

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word)
                .count(Materialized.as("counts"))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println(now == KafkaStreams.State.RUNNING ? "RUNNING" : "STATE " + now);
            System.out.flush();
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("UNCAUGHT " + e);
            System.out.flush();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        stopped.await();
    }
}
