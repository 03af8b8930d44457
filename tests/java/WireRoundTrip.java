// Parses every message given on stdin with Apache Kafka's own generated message classes (kafka-clients), as a
// broker or a client would, and writes it back with them: one line in, "NameData version hex", one line out, the
// hex Kafka writes for what it read, or "error: ..." (a field Kafka cannot parse, or bytes left over).
// Test equipment for tests/test_serve_wire.py: compiled there with javac against the oracle's kafka-clients jar.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;

public final class WireRoundTrip {
    private static final char[] DIGITS = "0123456789abcdef".toCharArray();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.trim().split(" ");
            try {
                short version = Short.parseShort(parts[1]);
                byte[] bytes = parts.length > 2 ? unhex(parts[2]) : new byte[0];
                ByteBuffer buffer = ByteBuffer.wrap(bytes);
                Class<?> cls = Class.forName("org.apache.kafka.common.message." + parts[0]);
                Message message = (Message) cls.getConstructor(Readable.class, short.class)
                    .newInstance(new ByteBufferAccessor(buffer), version);
                if (buffer.hasRemaining()) {
                    throw new IllegalStateException(buffer.remaining() + " bytes left after the message");
                }
                ObjectSerializationCache cache = new ObjectSerializationCache();
                ByteBuffer written = ByteBuffer.allocate(message.size(cache, version));
                message.write(new ByteBufferAccessor(written), cache, version);
                out.append(hex(written.array())).append('\n');
            } catch (Throwable e) {
                Throwable cause = e.getCause() != null ? e.getCause() : e;
                out.append("error: ").append(cause.getClass().getSimpleName()).append(": ")
                    .append(String.valueOf(cause.getMessage()).replace('\n', ' ')).append('\n');
            }
        }
        System.out.print(out);
    }

    private static byte[] unhex(String s) {
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }

    private static String hex(byte[] bytes) {
        char[] out = new char[bytes.length * 2];
        for (int i = 0; i < bytes.length; i++) {
            out[2 * i] = DIGITS[(bytes[i] >> 4) & 0xf];
            out[2 * i + 1] = DIGITS[bytes[i] & 0xf];
        }
        return new String(out);
    }
}
