// Consume every given partition from its beginning with Apache Kafka's Java KafkaConsumer, writing each record as
// a JSON line. Run by migrate.consumers (compiled there with javac against the kafka-clients jar it is given):
//   java -cp CLASSES:JARS JavaConsumer BOOTSTRAP OUT IDLE_MS DEADLINE_MS GROUP TOPIC:PARTITION:END ...
// Manual assignment (no group, nothing committed). It stops once every partition's position reached END, after
// IDLE_MS without a record or a position moving, or at DEADLINE_MS; its last line says which.

import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaConsumer {
    private static FileOutputStream out;

    private static void emit(String line) throws IOException {
        out.write((line + "\n").getBytes(StandardCharsets.UTF_8));  // unbuffered: a crash loses no line
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    private static final char[] DIGITS = "0123456789abcdef".toCharArray();

    private static String hex(byte[] bytes) {
        if (bytes == null) {
            return "null";
        }
        char[] out = new char[bytes.length * 2 + 2];
        out[0] = '"';
        for (int i = 0; i < bytes.length; i++) {
            out[1 + 2 * i] = DIGITS[(bytes[i] >> 4) & 0xf];
            out[2 + 2 * i] = DIGITS[bytes[i] & 0xf];
        }
        out[out.length - 1] = '"';
        return new String(out);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        out = new FileOutputStream(args[1], true);
        long idleMs = Long.parseLong(args[2]);
        long deadlineMs = Long.parseLong(args[3]);
        List<TopicPartition> tps = new ArrayList<>();
        Map<TopicPartition, Long> ends = new HashMap<>();
        for (int i = 5; i < args.length; i++) {
            String[] parts = args[i].split(":");
            String topic = String.join(":", java.util.Arrays.copyOf(parts, parts.length - 2));
            TopicPartition tp = new TopicPartition(topic, Integer.parseInt(parts[parts.length - 2]));
            tps.add(tp);
            ends.put(tp, Long.parseLong(parts[parts.length - 1]));
        }
        emit("{\"client\":" + quote("kafka-clients " + org.apache.kafka.common.utils.AppInfoParser.getVersion()) + "}");
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        String reason = "deadline";
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long start = System.nanoTime();
            long moved = start;
            Map<TopicPartition, Long> positions = new HashMap<>();
            while (System.nanoTime() - start < deadlineMs * 1_000_000L) {
                try {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        StringBuilder headers = new StringBuilder("[");
                        for (Header h : r.headers()) {
                            if (headers.length() > 1) {
                                headers.append(',');
                            }
                            headers.append('[').append(quote(h.key())).append(',').append(hex(h.value())).append(']');
                        }
                        headers.append(']');
                        emit("{\"r\":[" + quote(r.topic()) + "," + r.partition() + "," + r.offset() + "," + hex(r.key())
                            + "," + hex(r.value()) + "," + headers + "," + r.timestamp() + "]}");
                        moved = System.nanoTime();
                    }
                } catch (RuntimeException e) {
                    // whatever the client throws is its verdict on the data: record it, go on
                    emit("{\"error\":" + quote(e.getClass().getSimpleName() + ": " + e.getMessage()) + "}");
                    Thread.sleep(100);  // the same error again at once would only fill the output
                }
                Map<TopicPartition, Long> now = new HashMap<>();
                for (TopicPartition tp : tps) {
                    now.put(tp, consumer.position(tp));
                }
                if (!now.equals(positions)) {
                    positions = now;
                    moved = System.nanoTime();
                }
                boolean all = true;
                StringBuilder behind = new StringBuilder();
                for (TopicPartition tp : tps) {
                    if (positions.get(tp) < ends.get(tp)) {
                        all = false;
                        behind.append(behind.length() > 0 ? ", " : "").append(tp).append(" at ")
                            .append(positions.get(tp)).append(" of ").append(ends.get(tp));
                    }
                }
                if (all) {
                    reason = "every partition read to its end";
                    break;
                }
                if (System.nanoTime() - moved > idleMs * 1_000_000L) {
                    reason = "no progress for " + idleMs + " ms: " + behind;
                    break;
                }
            }
        }
        emit("{\"end\":" + quote(reason) + "}");
        out.close();
    }
}
