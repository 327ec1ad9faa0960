import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.ListIterator;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DeletedRecords;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java kafka-clients library driven from the compat tests.
 *
 * <p>Every command prints one JSON object per line on stdout; diagnostics go to stderr. Exit
 * code 0 on success, 1 on a client error, 2 on bad usage. Trailing KEY=VALUE arguments are
 * client properties that override the defaults below.
 */
public class KafkaTool {
    private static final String USAGE =
            "usage: KafkaTool <command> ...\n"
                    + "  create-topic BOOTSTRAP TOPIC PARTITIONS RF [k=v...]\n"
                    + "  list-topics BOOTSTRAP [k=v...]\n"
                    + "  describe-topic BOOTSTRAP TOPIC [k=v...]\n"
                    + "  produce BOOTSTRAP TOPIC COUNT [k=v...]\n"
                    + "  consume-assign BOOTSTRAP TOPIC PARTITION OFFSET|earliest|latest COUNT"
                    + " TIMEOUT_MS [k=v...]\n"
                    + "  consume-group BOOTSTRAP TOPIC GROUP COUNT TIMEOUT_MS [k=v...]\n"
                    + "  delete-records BOOTSTRAP TOPIC PARTITION BEFORE_OFFSET [k=v...]\n"
                    + "  elect-leaders BOOTSTRAP preferred|unclean TOPIC:P[,TOPIC:P...]|all"
                    + " [k=v...]\n"
                    + Transactions.USAGE
                    + SparkConnector.USAGE
                    + Security.USAGE
                    + Configs.USAGE;

    public static void main(String[] args) {
        silenceSlf4jWarning();
        if (args.length < 2) {
            System.err.print(USAGE);
            System.exit(2);
        }
        int code;
        try {
            code = run(args);
        } catch (UsageException e) {
            System.err.println(e.getMessage());
            System.err.print(USAGE);
            code = 2;
        } catch (Exception e) {
            e.printStackTrace();
            code = 1;
        }
        System.out.flush();
        System.exit(code);
    }

    private static int run(String[] args) throws Exception {
        String command = args[0];
        String bootstrap = args[1];
        switch (command) {
            case "create-topic":
                need(args, 5);
                return createTopic(bootstrap, args[2], Integer.parseInt(args[3]),
                        Short.parseShort(args[4]), props(args, 5));
            case "list-topics":
                return listTopics(bootstrap, props(args, 2));
            case "describe-topic":
                need(args, 3);
                return describeTopic(bootstrap, args[2], props(args, 3));
            case "produce":
                need(args, 4);
                return produce(bootstrap, args[2], Integer.parseInt(args[3]), props(args, 4));
            case "consume-assign":
                need(args, 7);
                return consumeAssign(bootstrap, args[2], Integer.parseInt(args[3]), args[4],
                        Integer.parseInt(args[5]), Long.parseLong(args[6]), props(args, 7));
            case "consume-group":
                need(args, 6);
                return consumeGroup(bootstrap, args[2], args[3], Integer.parseInt(args[4]),
                        Long.parseLong(args[5]), props(args, 6));
            case "delete-records":
                need(args, 5);
                return deleteRecords(bootstrap, args[2], Integer.parseInt(args[3]),
                        Long.parseLong(args[4]), props(args, 5));
            case "reassign":
                need(args, 3);
                return reassign(bootstrap, args[2], props(args, 3));
            case "list-reassignments":
                return listReassignments(bootstrap, props(args, 2));
            case "elect-leaders":
                need(args, 4);
                return electLeaders(bootstrap, args[2], args[3], props(args, 4));
            case "txn-produce":
                need(args, 4);
                return Transactions.txnProduce(bootstrap, args[2], Integer.parseInt(args[3]),
                        args, 4);
            case "txn-copy":
                need(args, 6);
                return Transactions.txnCopy(bootstrap, args[2], args[3], args[4],
                        Integer.parseInt(args[5]), args, 6);
            case "describe-transactions":
                need(args, 3);
                return Transactions.describeTransactions(bootstrap, args, 2);
            case "list-transactions":
                return Transactions.listTransactions(bootstrap, props(args, 2));
            case "consume-to-end":
                need(args, 4);
                return Transactions.consumeToEnd(bootstrap, args[2], Long.parseLong(args[3]),
                        props(args, 4));
            case "spark-write":
                need(args, 5);
                return SparkConnector.write(bootstrap, args[2], args[3],
                        Double.parseDouble(args[4]), props(args, 5));
            case "spark-offsets":
                need(args, 4);
                return SparkConnector.offsets(bootstrap, args[2], args[3], props(args, 4));
            case "spark-replay":
                need(args, 6);
                return SparkConnector.replay(bootstrap, args[2], args[3], args[4],
                        Boolean.parseBoolean(args[5]), args, 6);
            case "create-acls":
                need(args, 3);
                return Security.createAcls(bootstrap, args[2], props(args, 3));
            case "describe-acls":
                need(args, 3);
                return Security.describeAcls(bootstrap, args[2], props(args, 3));
            case "delete-acls":
                need(args, 3);
                return Security.deleteAcls(bootstrap, args[2], props(args, 3));
            case "describe-scram-users":
                return Security.describeScramUsers(bootstrap, props(args, 2));
            case "upsert-scram-user":
                need(args, 6);
                return Security.upsertScramUser(bootstrap, args[2], args[3],
                        Integer.parseInt(args[4]), args[5], props(args, 6));
            case "delete-scram-user":
                need(args, 4);
                return Security.deleteScramUser(bootstrap, args[2], args[3], props(args, 4));
            case "alter-configs":
                need(args, 5);
                return Configs.alter(bootstrap, args[2], args[3], args[4], props(args, 5));
            case "describe-configs":
                need(args, 4);
                return Configs.describe(bootstrap, args[2], args[3], props(args, 4));
            case "describe-log-dirs":
                need(args, 3);
                return Configs.describeLogDirs(bootstrap, args[2], props(args, 3));
            case "alter-replica-log-dirs":
                need(args, 4);
                return Configs.alterReplicaLogDirs(bootstrap, args[2], args[3], props(args, 4));
            default:
                throw new UsageException("unknown command: " + command);
        }
    }

    // -- admin -------------------------------------------------------------------------------

    private static Admin admin(String bootstrap, Properties overrides) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.putAll(overrides);
        return Admin.create(props);
    }

    private static int createTopic(String bootstrap, String topic, int partitions, short rf,
            Properties overrides) throws Exception {
        try (Admin admin = admin(bootstrap, overrides)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, rf))).all().get();
        }
        System.out.println("{\"topic\":" + str(topic) + ",\"partitions\":" + partitions
                + ",\"replication_factor\":" + rf + "}");
        return 0;
    }

    private static int listTopics(String bootstrap, Properties overrides) throws Exception {
        try (Admin admin = admin(bootstrap, overrides)) {
            Collection<String> names =
                    admin.listTopics(new ListTopicsOptions().listInternal(false)).names().get();
            for (String name : new TreeSet<>(names)) {
                System.out.println("{\"topic\":" + str(name) + "}");
            }
        }
        return 0;
    }

    private static int describeTopic(String bootstrap, String topic, Properties overrides)
            throws Exception {
        try (Admin admin = admin(bootstrap, overrides)) {
            Map<String, TopicDescription> descriptions =
                    admin.describeTopics(List.of(topic)).allTopicNames().get();
            TopicDescription description = descriptions.get(topic);
            String topicId = description.topicId() == null ? "null"
                    : str(description.topicId().toString());
            for (TopicPartitionInfo p : description.partitions()) {
                System.out.println("{\"topic\":" + str(topic) + ",\"topic_id\":" + topicId
                        + ",\"partition\":" + p.partition()
                        + ",\"leader\":" + (p.leader() == null ? -1 : p.leader().id())
                        + ",\"replicas\":" + nodeIds(p.replicas())
                        + ",\"isr\":" + nodeIds(p.isr()) + "}");
            }
        }
        return 0;
    }

    private static int deleteRecords(String bootstrap, String topic, int partition, long before,
            Properties overrides) throws Exception {
        TopicPartition tp = new TopicPartition(topic, partition);
        try (Admin admin = admin(bootstrap, overrides)) {
            DeletedRecords deleted = admin.deleteRecords(
                    Map.of(tp, RecordsToDelete.beforeOffset(before))).lowWatermarks().get(tp).get();
            System.out.println("{\"topic\":" + str(topic) + ",\"partition\":" + partition
                    + ",\"low_watermark\":" + deleted.lowWatermark() + "}");
        }
        return 0;
    }

    /**
     * alterPartitionReassignments: items "topic:partition=1,2,3" (or "topic:partition=cancel"),
     * separated by ";". One line per partition: its error name, or null when accepted.
     */
    private static int reassign(String bootstrap, String items, Properties overrides)
            throws Exception {
        Map<TopicPartition, java.util.Optional<NewPartitionReassignment>> wanted =
                new LinkedHashMap<>();
        for (String item : items.split(";")) {
            int eq = item.indexOf('=');
            String tpText = item.substring(0, eq);
            int colon = tpText.lastIndexOf(':');
            TopicPartition tp = new TopicPartition(tpText.substring(0, colon),
                    Integer.parseInt(tpText.substring(colon + 1)));
            String target = item.substring(eq + 1);
            if (target.equals("cancel")) {
                wanted.put(tp, java.util.Optional.empty());
            } else {
                List<Integer> replicas = new ArrayList<>();
                for (String id : target.split(",")) {
                    replicas.add(Integer.parseInt(id));
                }
                wanted.put(tp, java.util.Optional.of(new NewPartitionReassignment(replicas)));
            }
        }
        try (Admin admin = admin(bootstrap, overrides)) {
            Map<TopicPartition, KafkaFuture<Void>> results =
                    admin.alterPartitionReassignments(wanted).values();
            for (Map.Entry<TopicPartition, KafkaFuture<Void>> e : results.entrySet()) {
                String error = null;
                String message = null;
                try {
                    e.getValue().get();
                } catch (java.util.concurrent.ExecutionException exc) {
                    error = Errors.forException(exc.getCause()).name();
                    message = exc.getCause().getMessage();
                }
                System.out.println("{\"topic\":" + str(e.getKey().topic()) + ",\"partition\":"
                        + e.getKey().partition() + ",\"error\":" + str(error)
                        + ",\"message\":" + str(message) + "}");
            }
        }
        return 0;
    }

    /** listPartitionReassignments: one line per moving partition. */
    private static int listReassignments(String bootstrap, Properties overrides)
            throws Exception {
        try (Admin admin = admin(bootstrap, overrides)) {
            Map<TopicPartition, PartitionReassignment> moving =
                    admin.listPartitionReassignments().reassignments().get();
            for (Map.Entry<TopicPartition, PartitionReassignment> e
                    : new TreeMap<>(mapByName(moving)).values()) {
                PartitionReassignment r = e.getValue();
                System.out.println("{\"topic\":" + str(e.getKey().topic()) + ",\"partition\":"
                        + e.getKey().partition() + ",\"replicas\":" + r.replicas()
                        + ",\"adding\":" + r.addingReplicas() + ",\"removing\":"
                        + r.removingReplicas() + "}");
            }
        }
        return 0;
    }

    /** One line per partition the broker answered: its error name, or null when elected. */
    private static int electLeaders(String bootstrap, String type, String partitions,
            Properties overrides) throws Exception {
        ElectionType electionType = switch (type) {
            case "preferred" -> ElectionType.PREFERRED;
            case "unclean" -> ElectionType.UNCLEAN;
            default -> throw new UsageException("election type: preferred or unclean, not " + type);
        };
        Set<TopicPartition> wanted = null;
        if (!partitions.equals("all")) {
            wanted = new TreeSet<>((a, b) -> a.toString().compareTo(b.toString()));
            for (String item : partitions.split(",")) {
                int colon = item.lastIndexOf(':');
                wanted.add(new TopicPartition(item.substring(0, colon),
                        Integer.parseInt(item.substring(colon + 1))));
            }
        }
        try (Admin admin = admin(bootstrap, overrides)) {
            Map<TopicPartition, java.util.Optional<Throwable>> results =
                    admin.electLeaders(electionType, wanted).partitions().get();
            for (Map.Entry<TopicPartition, java.util.Optional<Throwable>> e
                    : new TreeMap<>(mapByName(results)).values()) {
                String error = e.getValue().map(t -> Errors.forException(t).name()).orElse(null);
                String message = e.getValue().map(Throwable::getMessage).orElse(null);
                System.out.println("{\"topic\":" + str(e.getKey().topic()) + ",\"partition\":"
                        + e.getKey().partition() + ",\"error\":" + str(error)
                        + ",\"message\":" + str(message) + "}");
            }
        }
        return 0;
    }

    private static <V> Map<String, Map.Entry<TopicPartition, V>> mapByName(
            Map<TopicPartition, V> results) {
        Map<String, Map.Entry<TopicPartition, V>> byName = new HashMap<>();
        for (Map.Entry<TopicPartition, V> e : results.entrySet()) {
            byName.put(e.getKey().topic() + String.format("-%08d", e.getKey().partition()), e);
        }
        return byName;
    }

    // -- producer ----------------------------------------------------------------------------

    private static int produce(String bootstrap, String topic, int count, Properties overrides)
            throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.putAll(overrides);
        List<Future<RecordMetadata>> acks = new ArrayList<>(count);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                acks.add(producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata md = acks.get(i).get();
                System.out.println("{\"topic\":" + str(md.topic()) + ",\"partition\":"
                        + md.partition() + ",\"offset\":" + md.offset() + ",\"key\":"
                        + str("k" + i) + ",\"timestamp\":" + md.timestamp() + "}");
            }
        }
        return 0;
    }

    // -- consumers ---------------------------------------------------------------------------

    private static Properties consumerProps(String bootstrap, Properties overrides) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class.getName());
        props.putAll(overrides);
        return props;
    }

    private static int consumeAssign(String bootstrap, String topic, int partition,
            String offset, int count, long timeoutMs, Properties overrides) {
        TopicPartition tp = new TopicPartition(topic, partition);
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(consumerProps(bootstrap, overrides))) {
            consumer.assign(List.of(tp));
            if (offset.equals("earliest")) {
                consumer.seekToBeginning(List.of(tp));
            } else if (offset.equals("latest")) {
                consumer.seekToEnd(List.of(tp));
            } else {
                consumer.seek(tp, Long.parseLong(offset));
            }
            int got = pollAndPrint(consumer, count, timeoutMs, false);
            report(got, count);
        }
        return 0;
    }

    private static int consumeGroup(String bootstrap, String topic, String group, int count,
            long timeoutMs, Properties overrides) {
        Properties props = consumerProps(bootstrap, overrides);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.putAll(overrides);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            int got = pollAndPrint(consumer, count, timeoutMs, true);
            report(got, count);
        }
        return 0;
    }

    private static int pollAndPrint(KafkaConsumer<String, String> consumer, int count,
            long timeoutMs, boolean commit) {
        long deadline = System.currentTimeMillis() + timeoutMs;
        int got = 0;
        while (got < count) {
            long left = deadline - System.currentTimeMillis();
            if (left <= 0) {
                break;
            }
            ConsumerRecords<String, String> records =
                    consumer.poll(Duration.ofMillis(Math.min(left, 500)));
            for (ConsumerRecord<String, String> r : records) {
                if (got >= count) {
                    break;
                }
                System.out.println("{\"topic\":" + str(r.topic()) + ",\"partition\":"
                        + r.partition() + ",\"offset\":" + r.offset() + ",\"key\":"
                        + str(r.key()) + ",\"value\":" + str(r.value()) + ",\"timestamp\":"
                        + r.timestamp() + "}");
                got++;
            }
            if (commit && !records.isEmpty()) {
                // Commits the position after the whole poll, as an application would.
                consumer.commitSync();
            }
        }
        return got;
    }

    private static void report(int got, int wanted) {
        if (got < wanted) {
            System.err.println("KafkaTool: consumed " + got + " of " + wanted
                    + " records before the timeout");
        }
    }

    // -- helpers -----------------------------------------------------------------------------

    private static void need(String[] args, int n) {
        if (args.length < n) {
            throw new UsageException(args[0] + " needs " + (n - 1) + " arguments");
        }
    }

    private static Properties props(String[] args, int from) {
        Properties props = new Properties();
        for (int i = from; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq <= 0) {
                throw new UsageException("expected KEY=VALUE, got " + args[i]);
            }
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        return props;
    }

    private static String nodeIds(List<Node> nodes) {
        StringBuilder out = new StringBuilder("[");
        for (int i = 0; i < nodes.size(); i++) {
            out.append(i == 0 ? "" : ",").append(nodes.get(i).id());
        }
        return out.append(']').toString();
    }

    /** A JSON string literal, or null. */
    private static String str(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        return out.append('"').toString();
    }

    /** slf4j-api without a binding prints a three-line warning on first use; hide it. */
    private static void silenceSlf4jWarning() {
        PrintStream err = System.err;
        try {
            System.setErr(new PrintStream(OutputStream.nullOutputStream()));
            Class.forName("org.slf4j.LoggerFactory")
                    .getMethod("getLogger", String.class)
                    .invoke(null, "KafkaTool");
        } catch (ReflectiveOperationException | LinkageError e) {
            // No slf4j on the class path: nothing to silence.
        } finally {
            System.setErr(err);
        }
    }

    // -- transactions ------------------------------------------------------------------------

    /**
     * A transactional KafkaProducer and a consumer that reads a topic to its end, for the
     * transaction tests. Each event is one JSON line, flushed at once so a test can follow a
     * running tool: {@code begin}, {@code acked} (per record), {@code paused}, {@code committed},
     * {@code aborted}, {@code commit_retry}, {@code redo}, and {@code error} (the operation,
     * the exception's class and message). A transaction that fails and is not redone ends the
     * command with exit code 3 after its error lines.
     */
    static final class Transactions {
        static final String USAGE =
                "  txn-produce BOOTSTRAP TOPIC COUNT --transactional-id=ID [--per-txn=N]\n"
                + "      [--abort-every=K] [--pause-before-commit=FILE] [--send-after-pause=N]\n"
                + "      [--redo-failed] [--key-prefix=P] [k=v...]\n"
                + "      COUNT records (keys P0.., P default k; values v0..), N to a transaction\n"
                + "      (default all); every K-th transaction is flushed, then aborted; before\n"
                + "      a commit the tool prints 'paused', waits for FILE to exist, then sends\n"
                + "      N more records; --redo-failed retries a timed-out commit and redoes a\n"
                + "      failed one\n"
                + "  txn-copy BOOTSTRAP IN OUT GROUP COUNT --transactional-id=ID [--batch=N]\n"
                + "      [--crash-after=N] [--pause-before-offsets=FILE] [k=v...] (consumer\n"
                + "      properties); copies COUNT records IN -> OUT in transactions that\n"
                + "      commit the group's offsets; halts inside the transaction that passes\n"
                + "      N; waits for FILE before the first transaction's offsets\n"
                + "  describe-transactions BOOTSTRAP ID [ID...] [k=v...]\n"
                + "  list-transactions BOOTSTRAP [k=v...]\n"
                + "  consume-to-end BOOTSTRAP TOPIC TIMEOUT_MS [k=v...]\n"
                + "      every partition from the beginning to its end offset (the last stable\n"
                + "      offset under isolation.level=read_committed), then one end line each\n";

        /** Exit code of a transaction that failed and was not redone. */
        static final int TXN_FAILED = 3;
        static final int MAX_COMMIT_RETRIES = 10;
        /** Exit code of txn-copy halting on purpose (--crash-after). */
        static final int CRASHED = 4;

        private Transactions() {}

        static Map<String, String> options(String[] args, int from, List<String> rest) {
            Map<String, String> options = new HashMap<>();
            for (int i = from; i < args.length; i++) {
                if (args[i].startsWith("--")) {
                    int eq = args[i].indexOf('=');
                    String name = eq < 0 ? args[i].substring(2) : args[i].substring(2, eq);
                    options.put(name, eq < 0 ? "true" : args[i].substring(eq + 1));
                } else {
                    rest.add(args[i]);
                }
            }
            return options;
        }

        static int txnProduce(String bootstrap, String topic, int count, String[] args,
                int from) throws Exception {
            List<String> rest = new ArrayList<>();
            Map<String, String> options = options(args, from, rest);
            String transactionalId = options.remove("transactional-id");
            if (transactionalId == null) {
                throw new UsageException("txn-produce needs --transactional-id=ID");
            }
            int perTxn = Integer.parseInt(options.getOrDefault("per-txn",
                    String.valueOf(Math.max(count, 1))));
            int abortEvery = Integer.parseInt(options.getOrDefault("abort-every", "0"));
            String pauseFile = options.remove("pause-before-commit");
            int sendAfterPause = Integer.parseInt(options.getOrDefault("send-after-pause", "0"));
            boolean redo = options.containsKey("redo-failed");
            String keyPrefix = options.getOrDefault("key-prefix", "k");
            options.keySet().removeAll(List.of("per-txn", "abort-every", "send-after-pause",
                    "redo-failed", "key-prefix"));
            if (!options.isEmpty()) {
                throw new UsageException("txn-produce: unknown options " + options.keySet());
            }
            if (perTxn <= 0) {
                throw new UsageException("txn-produce: --per-txn must be positive");
            }
            KafkaProducer<String, String> producer = new KafkaProducer<>(
                    producerProps(bootstrap, transactionalId, props(rest.toArray(new String[0]),
                            0)));
            try {
                producer.initTransactions();
                SparkConnector.emit("init", SparkConnector.obj("transactional_id",
                        transactionalId));
                int next = 0;
                int txn = 0;
                while (next < count || (count == 0 && txn == 0)) {
                    txn++;
                    int end = Math.min(count, next + perTxn);
                    boolean abort = abortEvery > 0 && txn % abortEvery == 0;
                    Outcome outcome = oneTransaction(producer, topic, keyPrefix, txn, next, end,
                            abort, abort ? null : pauseFile, sendAfterPause, redo);
                    while (outcome == Outcome.REDO) {
                        SparkConnector.emit("redo", SparkConnector.obj("txn", txn));
                        outcome = oneTransaction(producer, topic, keyPrefix, txn, next, end,
                                false, null, 0, redo);
                    }
                    if (outcome == Outcome.FAILED) {
                        return TXN_FAILED;
                    }
                    next = end;
                }
            } finally {
                producer.close(Duration.ofSeconds(5));
            }
            return 0;
        }

        enum Outcome { DONE, REDO, FAILED }

        static boolean fatal(Exception e) {
            return e instanceof org.apache.kafka.common.errors.ProducerFencedException
                    || e instanceof org.apache.kafka.common.errors.AuthorizationException
                    || e instanceof org.apache.kafka.common.errors.UnsupportedVersionException
                    || e instanceof IllegalStateException;
        }

        static void error(int txn, String op, Throwable e) {
            Throwable cause = e instanceof java.util.concurrent.ExecutionException
                    && e.getCause() != null ? e.getCause() : e;
            SparkConnector.emit("error", SparkConnector.obj("txn", txn, "op", op,
                    "exception", cause.getClass().getName(), "message", cause.getMessage()));
        }

        /** Aborts after a failure; the transaction is redone only when asked and possible. */
        static Outcome abortAfter(KafkaProducer<String, String> producer, int txn,
                Exception failure, boolean redo) {
            Throwable cause = failure instanceof java.util.concurrent.ExecutionException
                    && failure.getCause() != null ? failure.getCause() : failure;
            if (cause instanceof Exception && fatal((Exception) cause)) {
                return Outcome.FAILED;
            }
            try {
                producer.abortTransaction();
                SparkConnector.emit("aborted", SparkConnector.obj("txn", txn));
            } catch (Exception e) {
                error(txn, "abort", e);
                return Outcome.FAILED;
            }
            return redo ? Outcome.REDO : Outcome.FAILED;
        }

        static Outcome oneTransaction(KafkaProducer<String, String> producer, String topic,
                String keyPrefix, int txn, int from, int end, boolean abort, String pauseFile,
                int sendAfterPause, boolean redo) throws Exception {
            producer.beginTransaction();
            SparkConnector.emit("begin", SparkConnector.obj("txn", txn));
            List<String> keys = new ArrayList<>();
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = from; i < end; i++) {
                keys.add(keyPrefix + i);
                acks.add(producer.send(new ProducerRecord<>(topic, keyPrefix + i, "v" + i)));
            }
            try {
                producer.flush();
                awaitAcks(txn, keys, acks);
            } catch (Exception e) {
                error(txn, "send", e);
                return abortAfter(producer, txn, e, redo);
            }
            if (abort) {
                producer.abortTransaction();
                SparkConnector.emit("aborted", SparkConnector.obj("txn", txn));
                return Outcome.DONE;
            }
            if (pauseFile != null) {
                SparkConnector.emit("paused", SparkConnector.obj("txn", txn, "file", pauseFile));
                while (!Files.exists(Paths.get(pauseFile))) {
                    Thread.sleep(50);
                }
                if (sendAfterPause > 0) {
                    keys.clear();
                    acks.clear();
                    for (int i = 0; i < sendAfterPause; i++) {
                        String key = keyPrefix + (end + i) + "-after-pause";
                        keys.add(key);
                        acks.add(producer.send(new ProducerRecord<>(topic, key, "late")));
                    }
                    try {
                        producer.flush();
                        awaitAcks(txn, keys, acks);
                    } catch (Exception e) {
                        error(txn, "send", e);
                        return abortAfter(producer, txn, e, redo);
                    }
                }
            }
            for (int attempt = 1; ; attempt++) {
                try {
                    producer.commitTransaction();
                    SparkConnector.emit("committed", SparkConnector.obj("txn", txn,
                            "attempts", attempt));
                    return Outcome.DONE;
                } catch (org.apache.kafka.common.errors.TimeoutException e) {
                    // The client lets a timed-out commit be called again; it resumes it.
                    error(txn, "commit", e);
                    if (!redo || attempt >= MAX_COMMIT_RETRIES) {
                        return Outcome.FAILED;
                    }
                    SparkConnector.emit("commit_retry", SparkConnector.obj("txn", txn,
                            "attempt", attempt + 1));
                } catch (Exception e) {
                    error(txn, "commit", e);
                    return abortAfter(producer, txn, e, redo);
                }
            }
        }

        static void awaitAcks(int txn, List<String> keys, List<Future<RecordMetadata>> acks)
                throws Exception {
            for (int i = 0; i < acks.size(); i++) {
                RecordMetadata md = acks.get(i).get();
                SparkConnector.emit("acked", SparkConnector.obj("txn", txn, "key", keys.get(i),
                        "partition", md.partition(), "offset", md.offset()));
            }
        }

        static Properties producerProps(String bootstrap, String transactionalId,
                Properties overrides) {
            Properties props = new Properties();
            props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
            props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
            props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
            props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
            props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG,
                    StringSerializer.class.getName());
            props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG,
                    StringSerializer.class.getName());
            props.putAll(overrides);
            return props;
        }

        /**
         * Consume-transform-produce (KIP-447): a read_committed consumer in GROUP and a
         * transactional producer copy records from IN to OUT, committing the consumer's
         * offsets in each transaction with sendOffsetsToTransaction. With --crash-after=N the
         * process halts (no close, no commit) inside the first transaction that would take
         * the copied count past N, after sending its records and offsets. With
         * --pause-before-offsets=FILE the first transaction, its records sent, waits for FILE
         * before committing the offsets (with the group metadata of its poll); a failure
         * there aborts it and ends the command with exit code 3.
         */
        static int txnCopy(String bootstrap, String in, String out, String group, int count,
                String[] args, int from) throws Exception {
            List<String> rest = new ArrayList<>();
            Map<String, String> options = options(args, from, rest);
            String transactionalId = options.remove("transactional-id");
            if (transactionalId == null) {
                throw new UsageException("txn-copy needs --transactional-id=ID");
            }
            int batch = Integer.parseInt(options.getOrDefault("batch", "10"));
            int crashAfter = Integer.parseInt(options.getOrDefault("crash-after", "-1"));
            String pauseFile = options.remove("pause-before-offsets");
            options.keySet().removeAll(List.of("batch", "crash-after"));
            if (!options.isEmpty()) {
                throw new UsageException("txn-copy: unknown options " + options.keySet());
            }
            Properties overrides = props(rest.toArray(new String[0]), 0);
            Properties consumerProps = consumerProps(bootstrap, overrides);
            consumerProps.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            consumerProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            consumerProps.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(batch));
            consumerProps.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            consumerProps.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
            long deadline = System.currentTimeMillis() + 90_000;
            try (KafkaProducer<String, String> producer =
                            new KafkaProducer<>(producerProps(bootstrap, transactionalId,
                                    new Properties()));
                    KafkaConsumer<String, String> consumer =
                            new KafkaConsumer<>(consumerProps)) {
                producer.initTransactions();
                consumer.subscribe(List.of(in));
                int copied = 0;
                int txn = 0;
                while (copied < count) {
                    if (System.currentTimeMillis() > deadline) {
                        System.err.println("KafkaTool: txn-copy copied " + copied + " of "
                                + count + " records before the timeout");
                        return 1;
                    }
                    ConsumerRecords<String, String> records =
                            consumer.poll(Duration.ofMillis(500));
                    if (records.isEmpty()) {
                        continue;
                    }
                    txn++;
                    // Taken with the records, as a processing loop does: a pause below may
                    // outlive this member's place in the group.
                    org.apache.kafka.clients.consumer.ConsumerGroupMetadata groupMetadata =
                            consumer.groupMetadata();
                    producer.beginTransaction();
                    Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata>
                            offsets = new HashMap<>();
                    Map<String, Object> positions = new TreeMap<>();
                    for (ConsumerRecord<String, String> r : records) {
                        producer.send(new ProducerRecord<>(out, r.key(), r.value()));
                        TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                        offsets.put(tp, new org.apache.kafka.clients.consumer.OffsetAndMetadata(
                                r.offset() + 1));
                        positions.put(String.valueOf(r.partition()), r.offset() + 1);
                    }
                    if (pauseFile != null && txn == 1) {
                        producer.flush();
                        SparkConnector.emit("paused", SparkConnector.obj("txn", txn,
                                "records", records.count(), "generation",
                                groupMetadata.generationId()));
                        while (!Files.exists(Paths.get(pauseFile))) {
                            Thread.sleep(50);
                        }
                    }
                    try {
                        producer.sendOffsetsToTransaction(offsets, groupMetadata);
                    } catch (org.apache.kafka.common.KafkaException e) {
                        error(txn, "offsets", e);
                        if (!fatal(e)) {
                            producer.abortTransaction();
                            SparkConnector.emit("aborted", SparkConnector.obj("txn", txn));
                        }
                        return TXN_FAILED;
                    }
                    if (crashAfter >= 0 && copied + records.count() > crashAfter) {
                        producer.flush();
                        SparkConnector.emit("crashing", SparkConnector.obj("txn", txn,
                                "records", records.count(), "offsets", positions));
                        Runtime.getRuntime().halt(CRASHED);
                    }
                    producer.commitTransaction();
                    copied += records.count();
                    SparkConnector.emit("committed", SparkConnector.obj("txn", txn,
                            "records", records.count(), "offsets", positions));
                }
            }
            return 0;
        }

        /** Admin.describeTransactions: one line per id. */
        static int describeTransactions(String bootstrap, String[] args, int from)
                throws Exception {
            List<String> ids = new ArrayList<>();
            Properties overrides = new Properties();
            for (int i = from; i < args.length; i++) {
                if (args[i].indexOf('=') > 0) {
                    overrides.putAll(props(args, i));
                    break;
                }
                ids.add(args[i]);
            }
            try (Admin admin = admin(bootstrap, overrides)) {
                Map<String, org.apache.kafka.clients.admin.TransactionDescription> found =
                        admin.describeTransactions(ids).all().get();
                for (String id : ids) {
                    org.apache.kafka.clients.admin.TransactionDescription d = found.get(id);
                    List<TopicPartition> sorted = new ArrayList<>(d.topicPartitions());
                    sorted.sort((a, b) -> a.toString().compareTo(b.toString()));
                    List<Object> partitions = new ArrayList<>();
                    for (TopicPartition tp : sorted) {
                        partitions.add(java.util.Arrays.asList(tp.topic(), tp.partition()));
                    }
                    SparkConnector.emit("transaction", SparkConnector.obj("transactional_id", id,
                            "coordinator", d.coordinatorId(), "state", d.state().toString(),
                            "producer_id", d.producerId(), "producer_epoch", d.producerEpoch(),
                            "timeout_ms", d.transactionTimeoutMs(),
                            "started", d.transactionStartTimeMs().isPresent(),
                            "partitions", partitions));
                }
            }
            return 0;
        }

        /** Admin.listTransactions (every broker's coordinator): one line per id. */
        static int listTransactions(String bootstrap, Properties overrides) throws Exception {
            try (Admin admin = admin(bootstrap, overrides)) {
                for (org.apache.kafka.clients.admin.TransactionListing l
                        : admin.listTransactions().all().get()) {
                    SparkConnector.emit("transaction", SparkConnector.obj("transactional_id",
                            l.transactionalId(), "producer_id", l.producerId(),
                            "state", l.state().toString()));
                }
            }
            return 0;
        }

        static int consumeToEnd(String bootstrap, String topic, long timeoutMs,
                Properties overrides) {
            long deadline = System.currentTimeMillis() + timeoutMs;
            try (KafkaConsumer<String, String> consumer =
                    new KafkaConsumer<>(consumerProps(bootstrap, overrides))) {
                List<TopicPartition> partitions = new ArrayList<>();
                consumer.partitionsFor(topic).forEach(
                        p -> partitions.add(new TopicPartition(topic, p.partition())));
                consumer.assign(partitions);
                consumer.seekToBeginning(partitions);
                Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
                while (true) {
                    boolean done = true;
                    for (TopicPartition tp : partitions) {
                        done &= consumer.position(tp) >= ends.get(tp);
                    }
                    if (done) {
                        break;
                    }
                    long left = deadline - System.currentTimeMillis();
                    if (left <= 0) {
                        System.err.println("KafkaTool: consume-to-end timed out before "
                                + ends);
                        return 1;
                    }
                    for (ConsumerRecord<String, String> r :
                            consumer.poll(Duration.ofMillis(Math.min(left, 500)))) {
                        System.out.println("{\"topic\":" + str(r.topic()) + ",\"partition\":"
                                + r.partition() + ",\"offset\":" + r.offset() + ",\"key\":"
                                + str(r.key()) + ",\"value\":" + str(r.value()) + "}");
                    }
                }
                for (TopicPartition tp : partitions) {
                    System.out.println("{\"partition\":" + tp.partition() + ",\"end_offset\":"
                            + ends.get(tp) + "}");
                }
            }
            return 0;
        }
    }

    // -- Spark's Kafka connector ---------------------------------------------------------------

    /**
     * What Spark's Kafka connector (spark-sql-kafka-0-10) does with the Java client, call for
     * call, without Spark: the driver's {@code KafkaOffsetReaderAdmin} (an Admin built from the
     * driver's consumer configs: describeTopics, then listOffsets with
     * {@code ListOffsetsOptions(isolation.level)}), the executors' {@code KafkaDataConsumer}
     * (a KafkaConsumer with no group management: assign, seek, poll, position,
     * seekToBeginning/seekToEnd for the available range, and the same handling of invisible
     * offsets and of {@code OffsetOutOfRangeException} under {@code failOnDataLoss}), and the
     * sink's {@code KafkaWriteTask} (a KafkaProducer with default settings and
     * ByteArraySerializer).
     *
     * <p>Bytes travel as base64 (null stays null) in both the records file and the JSON lines.
     * A Spark query failure (data loss with failOnDataLoss=true, no offset for a starting
     * timestamp, a poll timeout, a failed write) is one {@code query_failed} line and exit code
     * 0; anything else unexpected is exit code 1.
     */
    static final class SparkConnector {
        static final String USAGE =
                "  spark-write BOOTSTRAP TOPIC RECORDS_FILE RATE_PER_S [k=v...]\n"
                + "      RECORDS_FILE: one record a line, tab-separated PARTITION TIMESTAMP KEY"
                + " VALUE HEADERS;\n"
                + "      '-' is null (partition: the producer's partitioner; timestamp: now);"
                + " bytes in base64;\n"
                + "      HEADERS: comma-separated NAME_B64:VALUE_B64 (value '-' is null)."
                + " RATE 0: as fast as possible\n"
                + "  spark-offsets BOOTSTRAP TOPIC TIMESTAMP[,TIMESTAMP...]|- [k=v...]\n"
                + "  spark-replay BOOTSTRAP TOPIC[:P,P...] STARTING ENDING FAIL_ON_DATA_LOSS"
                + " [--pause-after=N]\n"
                + "      [--poll-timeout-ms=N] [--timestamp-strategy=error|latest] [k=v...]\n"
                + "      STARTING: earliest | offsets:P=O,... | timestamps:P=T,... |"
                + " timestamp:T\n"
                + "      ENDING: latest | offsets:P=O,... | timestamps:P=T,... | timestamp:T\n"
                + "      (offset -2 is earliest, -1 latest, as in Spark's JSON options)\n"
                + "  k=v after a spark-* command: the query's kafka.* options, prefix dropped\n";

        /** KafkaOffsetRangeLimit.EARLIEST / LATEST and KafkaDataConsumer.UNKNOWN_OFFSET. */
        static final long EARLIEST = -2L;
        static final long LATEST = -1L;
        static final long UNKNOWN_OFFSET = -2L;
        /** Spark's default poll timeout is spark.network.timeout, 120 s. */
        static final long DEFAULT_POLL_TIMEOUT_MS = 120_000L;
        /** fetchoffset.numretries and fetchoffset.retryintervalms defaults. */
        static final int OFFSET_FETCH_ATTEMPTS = 3;
        static final long OFFSET_FETCH_RETRY_INTERVAL_MS = 1000L;

        private SparkConnector() {}

        // -- JSON out ------------------------------------------------------------------------

        static Map<String, Object> obj(Object... keyValues) {
            Map<String, Object> out = new LinkedHashMap<>();
            for (int i = 0; i < keyValues.length; i += 2) {
                out.put((String) keyValues[i], keyValues[i + 1]);
            }
            return out;
        }

        static String json(Object value) {
            if (value == null) {
                return "null";
            }
            if (value instanceof String) {
                return str((String) value);
            }
            if (value instanceof Number || value instanceof Boolean) {
                return value.toString();
            }
            if (value instanceof byte[]) {
                return str(Base64.getEncoder().encodeToString((byte[]) value));
            }
            StringBuilder out = new StringBuilder();
            if (value instanceof Map) {
                out.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                    out.append(first ? "" : ",").append(str(String.valueOf(e.getKey())))
                            .append(':').append(json(e.getValue()));
                    first = false;
                }
                return out.append('}').toString();
            }
            if (value instanceof Collection) {
                out.append('[');
                boolean first = true;
                for (Object item : (Collection<?>) value) {
                    out.append(first ? "" : ",").append(json(item));
                    first = false;
                }
                return out.append(']').toString();
            }
            return str(value.toString());
        }

        static synchronized void emit(String key, Object value) {
            System.out.println(json(obj(key, value)));
            System.out.flush();
        }

        static String describe(Throwable e) {
            return e.getClass().getSimpleName() + ": " + e.getMessage();
        }

        static Map<String, Object> recordJson(ConsumerRecord<byte[], byte[]> r) {
            List<Object> headers = new ArrayList<>();
            for (Header h : r.headers()) {
                headers.add(java.util.Arrays.asList(h.key(),
                        h.value() == null ? null : (Object) h.value()));
            }
            return obj("topic", r.topic(), "partition", r.partition(), "offset", r.offset(),
                    "timestamp", r.timestamp(), "timestamp_type", r.timestampType().name,
                    "key", r.key(), "value", r.value(), "headers", headers,
                    "leader_epoch", r.leaderEpoch().orElse(-1));
        }

        // -- configs Spark forces (KafkaSourceProvider) --------------------------------------

        /** kafkaParamsForDriver: what the driver's Admin is created with. */
        static Map<String, Object> driverParams(String bootstrap, Properties specified) {
            Map<String, Object> params = specifiedParams(bootstrap, specified);
            params.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                    ByteArrayDeserializer.class.getName());
            params.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                    ByteArrayDeserializer.class.getName());
            params.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            params.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            params.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 1);
            params.putIfAbsent(ConsumerConfig.RECEIVE_BUFFER_CONFIG, 65536);
            return params;
        }

        /** kafkaParamsForExecutors with a batch query's group id (batchUniqueGroupId). */
        static Map<String, Object> executorParams(String bootstrap, Properties specified,
                String uniqueGroupId) {
            Map<String, Object> params = specifiedParams(bootstrap, specified);
            params.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                    ByteArrayDeserializer.class.getName());
            params.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                    ByteArrayDeserializer.class.getName());
            params.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
            params.putIfAbsent(ConsumerConfig.GROUP_ID_CONFIG, uniqueGroupId + "-executor");
            params.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            params.putIfAbsent(ConsumerConfig.RECEIVE_BUFFER_CONFIG, 65536);
            return params;
        }

        /** kafkaParamsForProducer: the user's kafka.* options and byte-array serializers. */
        static Map<String, Object> producerParams(String bootstrap, Properties specified) {
            Map<String, Object> params = specifiedParams(bootstrap, specified);
            params.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG,
                    ByteArraySerializer.class.getName());
            params.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG,
                    ByteArraySerializer.class.getName());
            return params;
        }

        /** The query's kafka.* options with the prefix dropped (convertToSpecifiedParams). */
        static Map<String, Object> specifiedParams(String bootstrap, Properties specified) {
            Map<String, Object> params = new HashMap<>();
            params.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            for (String name : specified.stringPropertyNames()) {
                params.put(name, specified.getProperty(name));
            }
            return params;
        }

        static IsolationLevel isolationLevel(Map<String, Object> driverParams) {
            Object level = driverParams.get(ConsumerConfig.ISOLATION_LEVEL_CONFIG);
            String name = level == null ? ConsumerConfig.DEFAULT_ISOLATION_LEVEL : (String) level;
            return IsolationLevel.valueOf(name.toUpperCase(Locale.ROOT));
        }

        // -- sink: KafkaWriteTask ------------------------------------------------------------

        static byte[] bytes(String field) {
            return field.equals("-") ? null : Base64.getDecoder().decode(field);
        }

        static ProducerRecord<byte[], byte[]> parseRecord(String topic, String line) {
            String[] f = line.split("\t", -1);
            if (f.length != 5) {
                throw new UsageException("records file: expected 5 tab-separated fields, got "
                        + f.length + ": " + line);
            }
            Integer partition = f[0].equals("-") ? null : Integer.valueOf(f[0]);
            Long timestamp = f[1].equals("-") ? null : Long.valueOf(f[1]);
            List<Header> headers = new ArrayList<>();
            if (!f[4].isEmpty() && !f[4].equals("-")) {
                for (String pair : f[4].split(",")) {
                    int colon = pair.indexOf(':');
                    String name = new String(Base64.getDecoder().decode(pair.substring(0, colon)),
                            StandardCharsets.UTF_8);
                    headers.add(new RecordHeader(name, bytes(pair.substring(colon + 1))));
                }
            }
            return new ProducerRecord<>(topic, partition, timestamp, bytes(f[2]), bytes(f[3]),
                    headers);
        }

        /**
         * Sends every record of RECORDS_FILE the way KafkaWriteTask does (send with a callback
         * that keeps the first failure, stop sending once one failed, flush at the end). Each
         * acknowledgement is printed when it arrives: {"ack": {index, partition, offset,
         * timestamp}}; then {"write": {sent, acked, failed}}.
         */
        static int write(String bootstrap, String topic, String recordsFile, double ratePerS,
                Properties specified) throws Exception {
            List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
            for (String line : Files.readAllLines(Paths.get(recordsFile), StandardCharsets.UTF_8)) {
                if (!line.isEmpty()) {
                    records.add(parseRecord(topic, line));
                }
            }
            AtomicReference<Exception> failedWrite = new AtomicReference<>();
            AtomicInteger acked = new AtomicInteger();
            int sent = 0;
            long startNs = System.nanoTime();
            try (KafkaProducer<byte[], byte[]> producer =
                    new KafkaProducer<>(producerParams(bootstrap, specified))) {
                for (int i = 0; i < records.size() && failedWrite.get() == null; i++) {
                    final int index = i;
                    producer.send(records.get(i), (RecordMetadata md, Exception e) -> {
                        if (e != null) {
                            failedWrite.compareAndSet(null, e);
                            return;
                        }
                        acked.incrementAndGet();
                        emit("ack", obj("index", index, "partition", md.partition(),
                                "offset", md.offset(), "timestamp", md.timestamp()));
                    });
                    sent++;
                    if (ratePerS > 0) {
                        long dueNs = startNs + (long) ((i + 1) * 1e9 / ratePerS);
                        long sleepMs = (dueNs - System.nanoTime()) / 1_000_000L;
                        if (sleepMs > 0) {
                            Thread.sleep(sleepMs);
                        }
                    }
                }
                producer.flush();
            }
            Exception failure = failedWrite.get();
            if (failure != null) {
                emit("query_failed", obj("error", "write_failed", "message", describe(failure)));
            }
            emit("write", obj("sent", sent, "acked", acked.get(),
                    "failed", failure == null ? null : describe(failure)));
            return 0;
        }

        // -- driver: KafkaOffsetReaderAdmin --------------------------------------------------

        /** The topic name and, for Spark's "assign" option, the assigned partitions. */
        static final class Strategy {
            final String topic;
            final Set<Integer> assigned;  // null: "subscribe"

            Strategy(String spec) {
                int colon = spec.indexOf(':');
                if (colon < 0) {
                    topic = spec;
                    assigned = null;
                } else {
                    topic = spec.substring(0, colon);
                    assigned = new TreeSet<>();
                    for (String p : spec.substring(colon + 1).split(",")) {
                        assigned.add(Integer.valueOf(p));
                    }
                }
            }

            /** ConsumerStrategy.assignedTopicPartitions: describeTopics, then filter. */
            List<TopicPartition> partitions(Admin admin) throws Exception {
                TopicDescription description =
                        admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                List<TopicPartition> out = new ArrayList<>();
                if (description.isInternal()) {
                    return out;
                }
                for (TopicPartitionInfo info : description.partitions()) {
                    if (assigned == null || assigned.contains(info.partition())) {
                        out.add(new TopicPartition(topic, info.partition()));
                    }
                }
                return out;
            }
        }

        /** A parsed startingOffsets/endingOffsets(ByTimestamp)/starting/endingTimestamp. */
        static final class RangeLimit {
            final String kind;  // earliest, latest, offsets, timestamps, timestamp
            final Map<Integer, Long> perPartition = new TreeMap<>();
            long globalTimestamp;

            RangeLimit(String spec) {
                int colon = spec.indexOf(':');
                kind = colon < 0 ? spec : spec.substring(0, colon);
                switch (kind) {
                    case "earliest":
                    case "latest":
                        break;
                    case "offsets":
                    case "timestamps":
                        for (String pair : spec.substring(colon + 1).split(",")) {
                            int eq = pair.indexOf('=');
                            perPartition.put(Integer.valueOf(pair.substring(0, eq)),
                                    Long.valueOf(pair.substring(eq + 1)));
                        }
                        break;
                    case "timestamp":
                        globalTimestamp = Long.parseLong(spec.substring(colon + 1));
                        break;
                    default:
                        throw new UsageException("bad offsets spec: " + spec);
                }
            }
        }

        /** Raised where Spark fails the query; becomes one query_failed line. */
        static final class QueryFailed extends RuntimeException {
            private static final long serialVersionUID = 1L;
            final Map<String, Object> details;

            QueryFailed(Map<String, Object> details) {
                super(String.valueOf(details.get("message")));
                this.details = details;
            }
        }

        static final class Driver implements AutoCloseable {
            final Map<String, Object> params;
            final Strategy strategy;
            final ListOffsetsOptions listOffsetsOptions;
            Admin admin;

            Driver(Map<String, Object> params, Strategy strategy) {
                this.params = params;
                this.strategy = strategy;
                this.listOffsetsOptions = new ListOffsetsOptions(isolationLevel(params));
            }

            Admin admin() {
                if (admin == null) {
                    admin = Admin.create(params);
                }
                return admin;
            }

            @Override
            public void close() {
                if (admin != null) {
                    admin.close();
                    admin = null;
                }
            }

            interface Body {
                Map<TopicPartition, Long> apply(List<TopicPartition> partitions) throws Exception;
            }

            /** partitionsAssignedToAdmin + withRetries: three attempts, a fresh Admin each. */
            Map<TopicPartition, Long> withPartitions(Body body) throws Exception {
                Exception last = null;
                for (int attempt = 1; attempt <= OFFSET_FETCH_ATTEMPTS; attempt++) {
                    try {
                        return body.apply(strategy.partitions(admin()));
                    } catch (QueryFailed e) {
                        throw e;
                    } catch (Exception e) {
                        last = e;
                        emit("retry", obj("attempt", attempt, "error", describe(e)));
                        Thread.sleep(OFFSET_FETCH_RETRY_INTERVAL_MS);
                        close();
                    }
                }
                throw last;
            }

            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> listOffsets(
                    Map<TopicPartition, OffsetSpec> specs) throws Exception {
                if (specs.isEmpty()) {
                    return Map.of();
                }
                return admin().listOffsets(specs, listOffsetsOptions).all().get();
            }

            /** fetchPartitionOffsets: earliest/latest stay unresolved (late binding). */
            Map<TopicPartition, Long> partitionOffsets(RangeLimit limit, boolean isStarting,
                    String timestampStrategy) throws Exception {
                switch (limit.kind) {
                    case "earliest":
                    case "latest": {
                        long unresolved = limit.kind.equals("earliest") ? EARLIEST : LATEST;
                        Map<TopicPartition, Long> out = new TreeMap<>(BY_PARTITION);
                        for (TopicPartition tp : strategy.partitions(admin())) {
                            out.put(tp, unresolved);
                        }
                        return out;
                    }
                    case "offsets": {
                        Map<TopicPartition, Long> out = new TreeMap<>(BY_PARTITION);
                        Set<Integer> have = new TreeSet<>();
                        for (TopicPartition tp : strategy.partitions(admin())) {
                            have.add(tp.partition());
                        }
                        if (!have.equals(limit.perPartition.keySet())) {
                            throw new QueryFailed(obj("error", "partitions_mismatch",
                                    "message", "If startingOffsets contains specific offsets,"
                                            + " you must specify all TopicPartitions. Specified: "
                                            + limit.perPartition.keySet() + " Assigned: " + have));
                        }
                        limit.perPartition.forEach(
                                (p, o) -> out.put(new TopicPartition(strategy.topic, p), o));
                        return out;
                    }
                    default:
                        return timestampOffsets(limit, isStarting, timestampStrategy);
                }
            }

            /** fetchSpecific/GlobalTimestampBasedOffsets and fetchSpecificOffsets0. */
            Map<TopicPartition, Long> timestampOffsets(RangeLimit limit, boolean isStarting,
                    String timestampStrategy) throws Exception {
                return withPartitions(partitions -> {
                    Map<TopicPartition, Long> timestamps = new TreeMap<>(BY_PARTITION);
                    if (limit.kind.equals("timestamps")) {
                        Set<Integer> have = new TreeSet<>();
                        partitions.forEach(tp -> have.add(tp.partition()));
                        if (!have.equals(limit.perPartition.keySet())) {
                            throw new QueryFailed(obj("error", "partitions_mismatch",
                                    "message", "If starting/endingOffsetsByTimestamp contains"
                                            + " specific offsets, you must specify all topics."
                                            + " Specified: " + limit.perPartition.keySet()
                                            + " Assigned: " + have));
                        }
                        limit.perPartition.forEach(
                                (p, t) -> timestamps.put(new TopicPartition(strategy.topic, p), t));
                    } else {
                        partitions.forEach(tp -> timestamps.put(tp, limit.globalTimestamp));
                    }
                    Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
                    timestamps.forEach((tp, t) -> specs.put(tp, OffsetSpec.forTimestamp(t)));
                    Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> found =
                            listOffsets(specs);
                    // readTimestampOffsets: no match is an error or "latest" for a start,
                    // always "latest" for an end.
                    Map<TopicPartition, Long> offsets = new TreeMap<>(BY_PARTITION);
                    for (Map.Entry<TopicPartition, Long> e : timestamps.entrySet()) {
                        long offset = found.get(e.getKey()).offset();
                        if (offset == -1L) {
                            if (isStarting && timestampStrategy.equals("error")) {
                                throw new QueryFailed(obj("error", "no_offset_for_timestamp",
                                        "partition", e.getKey().partition(),
                                        "timestamp", e.getValue(),
                                        "message", "No offset matched from request of"
                                                + " topic-partition " + e.getKey()
                                                + " and timestamp " + e.getValue() + "."));
                            }
                            offset = LATEST;
                        }
                        offsets.put(e.getKey(), offset);
                    }
                    // Resolve latest/earliest through the Admin, as fetchSpecificOffsets0 does.
                    Map<TopicPartition, OffsetSpec> unresolved = new HashMap<>();
                    offsets.forEach((tp, o) -> {
                        if (o == LATEST) {
                            unresolved.put(tp, OffsetSpec.latest());
                        } else if (o == EARLIEST) {
                            unresolved.put(tp, OffsetSpec.earliest());
                        }
                    });
                    listOffsets(unresolved).forEach((tp, info) -> offsets.put(tp, info.offset()));
                    return offsets;
                });
            }
        }

        static final java.util.Comparator<TopicPartition> BY_PARTITION =
                java.util.Comparator.comparing(TopicPartition::topic)
                        .thenComparingInt(TopicPartition::partition);

        /**
         * Admin.describeTopics, then for each isolation level listOffsets earliest, latest and
         * forTimestamp(T) per partition: {"partition": {...}} then {"offsets": {partition,
         * isolation, earliest, latest, by_timestamp: [{timestamp, offset, record_timestamp,
         * leader_epoch}]}}.
         */
        static int offsets(String bootstrap, String topic, String timestampList,
                Properties specified) throws Exception {
            List<Long> timestamps = new ArrayList<>();
            if (!timestampList.equals("-")) {
                for (String t : timestampList.split(",")) {
                    timestamps.add(Long.valueOf(t));
                }
            }
            Map<String, Object> params = driverParams(bootstrap, specified);
            try (Admin admin = Admin.create(params)) {
                TopicDescription description =
                        admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                List<TopicPartition> partitions = new ArrayList<>();
                for (TopicPartitionInfo info : description.partitions()) {
                    partitions.add(new TopicPartition(topic, info.partition()));
                    emit("partition", obj("topic", topic, "partition", info.partition(),
                            "leader", info.leader() == null ? -1 : info.leader().id(),
                            "replicas", ids(info.replicas()), "isr", ids(info.isr())));
                }
                for (IsolationLevel level : List.of(IsolationLevel.READ_UNCOMMITTED,
                        IsolationLevel.READ_COMMITTED)) {
                    ListOffsetsOptions options = new ListOffsetsOptions(level);
                    Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
                    Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
                    partitions.forEach(tp -> {
                        earliest.put(tp, OffsetSpec.earliest());
                        latest.put(tp, OffsetSpec.latest());
                    });
                    var first = admin.listOffsets(earliest, options).all().get();
                    var last = admin.listOffsets(latest, options).all().get();
                    List<Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo>> byTs =
                            new ArrayList<>();
                    for (long t : timestamps) {
                        Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
                        partitions.forEach(tp -> specs.put(tp, OffsetSpec.forTimestamp(t)));
                        byTs.add(admin.listOffsets(specs, options).all().get());
                    }
                    for (TopicPartition tp : partitions) {
                        List<Object> found = new ArrayList<>();
                        for (int i = 0; i < timestamps.size(); i++) {
                            ListOffsetsResult.ListOffsetsResultInfo info = byTs.get(i).get(tp);
                            found.add(obj("timestamp", timestamps.get(i), "offset", info.offset(),
                                    "record_timestamp", info.timestamp(),
                                    "leader_epoch", info.leaderEpoch().orElse(-1)));
                        }
                        emit("offsets", obj("partition", tp.partition(),
                                "isolation", level.toString().toLowerCase(Locale.ROOT),
                                "earliest", first.get(tp).offset(),
                                "earliest_leader_epoch", first.get(tp).leaderEpoch().orElse(-1),
                                "latest", last.get(tp).offset(),
                                "latest_leader_epoch", last.get(tp).leaderEpoch().orElse(-1),
                                "by_timestamp", found));
                    }
                }
            }
            return 0;
        }

        static List<Integer> ids(List<Node> nodes) {
            List<Integer> out = new ArrayList<>();
            nodes.forEach(n -> out.add(n.id()));
            return out;
        }

        // -- a batch query: KafkaBatch.planInputPartitions + KafkaBatchPartitionReader --------

        /**
         * Plans the query on the "driver" (offset ranges through the Admin), then reads every
         * range on an "executor" (one KafkaDataConsumer per partition, one after another).
         * Prints {"range": {...}} per partition as planned, {"record": {...}} per row, events
         * ({"skipped": ...} for invisible offsets, {"data_loss": ...} when failOnDataLoss is
         * false), {"paused": ...} when --pause-after is reached (a line on stdin resumes), and
         * {"done": {...}} per partition; or {"query_failed": {...}} where Spark fails.
         */
        static int replay(String bootstrap, String strategySpec, String starting, String ending,
                boolean failOnDataLoss, String[] args, int from) throws Exception {
            long pauseAfter = -1;
            long pollTimeoutMs = DEFAULT_POLL_TIMEOUT_MS;
            String timestampStrategy = "error";
            List<String> rest = new ArrayList<>();
            for (int i = from; i < args.length; i++) {
                String a = args[i];
                if (a.startsWith("--pause-after=")) {
                    pauseAfter = Long.parseLong(a.substring("--pause-after=".length()));
                } else if (a.startsWith("--poll-timeout-ms=")) {
                    pollTimeoutMs = Long.parseLong(a.substring("--poll-timeout-ms=".length()));
                } else if (a.startsWith("--timestamp-strategy=")) {
                    timestampStrategy = a.substring("--timestamp-strategy=".length());
                } else {
                    rest.add(a);
                }
            }
            Properties specified = props(rest.toArray(new String[0]), 0);
            Strategy strategy = new Strategy(strategySpec);
            RangeLimit startLimit = new RangeLimit(starting);
            RangeLimit endLimit = new RangeLimit(ending);
            String uniqueGroupId = "spark-kafka-relation-" + UUID.randomUUID();

            Map<TopicPartition, Long> fromOffsets;
            Map<TopicPartition, Long> untilOffsets;
            try (Driver driver = new Driver(driverParams(bootstrap, specified), strategy)) {
                fromOffsets = driver.partitionOffsets(startLimit, true, timestampStrategy);
                untilOffsets = driver.partitionOffsets(endLimit, false, timestampStrategy);
            } catch (QueryFailed e) {
                emit("query_failed", e.details);
                return 0;
            }
            if (!fromOffsets.keySet().equals(untilOffsets.keySet())) {
                emit("query_failed", obj("error", "partitions_changed", "message",
                        "different topic partitions for starting and ending offsets"));
                return 0;
            }
            for (TopicPartition tp : fromOffsets.keySet()) {
                emit("range", obj("topic", tp.topic(), "partition", tp.partition(),
                        "from", fromOffsets.get(tp), "until", untilOffsets.get(tp)));
            }

            Map<String, Object> executorParams =
                    executorParams(bootstrap, specified, uniqueGroupId);
            long[] emitted = {0};
            BufferedReader stdin =
                    new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (TopicPartition tp : fromOffsets.keySet()) {
                try (PartitionReader reader = new PartitionReader(tp, executorParams,
                        fromOffsets.get(tp), untilOffsets.get(tp), pollTimeoutMs,
                        failOnDataLoss)) {
                    ConsumerRecord<byte[], byte[]> r;
                    while ((r = reader.next()) != null) {
                        emit("record", recordJson(r));
                        emitted[0]++;
                        if (emitted[0] == pauseAfter) {
                            emit("paused", obj("partition", tp.partition(),
                                    "next_offset", r.offset() + 1));
                            stdin.readLine();
                        }
                    }
                    emit("done", reader.summary());
                } catch (QueryFailed e) {
                    emit("query_failed", e.details);
                    return 0;
                }
            }
            return 0;
        }

        /** KafkaBatchPartitionReader over one KafkaDataConsumer. */
        static final class PartitionReader implements AutoCloseable {
            final TopicPartition tp;
            final DataConsumer consumer;
            final long fromOffset;
            final long untilOffset;
            final long pollTimeoutMs;
            final boolean failOnDataLoss;
            long nextOffset;
            long records;

            PartitionReader(TopicPartition tp, Map<String, Object> params, long from, long until,
                    long pollTimeoutMs, boolean failOnDataLoss) {
                this.tp = tp;
                this.consumer = new DataConsumer(tp, params, failOnDataLoss);
                // resolveRange: earliest/latest bound late, on the executor, by the consumer.
                if (from < 0 || until < 0) {
                    long[] available = consumer.availableOffsetRange();
                    from = from < 0 ? available[0] : from;
                    until = until < 0 ? available[1] : until;
                }
                this.fromOffset = from;
                this.untilOffset = until;
                this.nextOffset = from;
                this.pollTimeoutMs = pollTimeoutMs;
                this.failOnDataLoss = failOnDataLoss;
            }

            ConsumerRecord<byte[], byte[]> next() {
                if (nextOffset >= untilOffset) {
                    return null;
                }
                ConsumerRecord<byte[], byte[]> r =
                        consumer.get(nextOffset, untilOffset, pollTimeoutMs);
                if (r != null) {
                    nextOffset = r.offset() + 1;
                    records++;
                }
                return r;
            }

            Map<String, Object> summary() {
                return obj("topic", tp.topic(), "partition", tp.partition(), "from", fromOffset,
                        "until", untilOffset, "records", records, "polls", consumer.polls,
                        "data_loss", consumer.dataLoss,
                        "offset_out_of_range", consumer.offsetOutOfRange,
                        "group_id", consumer.groupId);
            }

            @Override
            public void close() {
                consumer.close();
            }
        }

        /** FetchedData: the records of the last poll and where that poll left the consumer. */
        static final class FetchedData {
            ListIterator<ConsumerRecord<byte[], byte[]>> records =
                    Collections.emptyListIterator();
            long nextOffsetInFetchedData = UNKNOWN_OFFSET;
            long offsetAfterPoll = UNKNOWN_OFFSET;
            long[] availableOffsetRange = {UNKNOWN_OFFSET, UNKNOWN_OFFSET};

            void withNewPoll(List<ConsumerRecord<byte[], byte[]>> polled, long afterPoll,
                    long[] range) {
                records = polled.listIterator();
                nextOffsetInFetchedData = UNKNOWN_OFFSET;
                offsetAfterPoll = afterPoll;
                availableOffsetRange = range;
            }

            ConsumerRecord<byte[], byte[]> next() {
                ConsumerRecord<byte[], byte[]> r = records.next();
                nextOffsetInFetchedData = r.offset() + 1;
                return r;
            }

            ConsumerRecord<byte[], byte[]> previous() {
                ConsumerRecord<byte[], byte[]> r = records.previous();
                nextOffsetInFetchedData = r.offset();
                return r;
            }

            void reset() {
                records = Collections.emptyListIterator();
                nextOffsetInFetchedData = UNKNOWN_OFFSET;
                offsetAfterPoll = UNKNOWN_OFFSET;
                availableOffsetRange = new long[] {UNKNOWN_OFFSET, UNKNOWN_OFFSET};
            }
        }

        /** KafkaDataConsumer over InternalKafkaConsumer, for one partition. */
        static final class DataConsumer implements AutoCloseable {
            final TopicPartition tp;
            final KafkaConsumer<byte[], byte[]> consumer;
            final String groupId;
            final boolean failOnDataLoss;
            final FetchedData fetchedData = new FetchedData();
            long polls;
            long dataLoss;
            long offsetOutOfRange;

            DataConsumer(TopicPartition tp, Map<String, Object> params, boolean failOnDataLoss) {
                this.tp = tp;
                this.groupId = (String) params.get(ConsumerConfig.GROUP_ID_CONFIG);
                this.failOnDataLoss = failOnDataLoss;
                this.consumer = new KafkaConsumer<>(params);
                consumer.assign(List.of(tp));
            }

            @Override
            public void close() {
                consumer.close();
            }

            /** InternalKafkaConsumer.getAvailableOffsetRange: {earliest, latest}. */
            long[] availableOffsetRange() {
                consumer.seekToBeginning(Set.of(tp));
                long earliest = consumer.position(tp);
                consumer.seekToEnd(Set.of(tp));
                long latest = consumer.position(tp);
                return new long[] {earliest, latest};
            }

            /** InternalKafkaConsumer.fetch: seek, poll, position, available range. */
            void fetchData(long offset, long pollTimeoutMs) {
                consumer.seek(tp, offset);
                ConsumerRecords<byte[], byte[]> polled =
                        consumer.poll(Duration.ofMillis(pollTimeoutMs));
                List<ConsumerRecord<byte[], byte[]>> records = polled.records(tp);
                long offsetAfterPoll = consumer.position(tp);
                long[] range = availableOffsetRange();
                polls++;
                if (records.isEmpty()) {
                    if (offset < range[0] || offset >= range[1]) {
                        throw new OffsetOutOfRangeException(Map.of(tp, offset));
                    } else if (offset == offsetAfterPoll) {
                        throw new QueryFailed(obj("error", "timeout", "partition",
                                tp.partition(), "offset", offset, "message",
                                "Cannot fetch record for offset " + offset + " in "
                                        + pollTimeoutMs + " milliseconds"));
                    }
                }
                fetchedData.withNewPoll(new ArrayList<>(records), offsetAfterPoll, range);
            }

            /** KafkaDataConsumer.get: the record at `offset`, or the next one Spark accepts. */
            ConsumerRecord<byte[], byte[]> get(long offset, long untilOffset,
                    long pollTimeoutMs) {
                long toFetchOffset = offset;
                while (toFetchOffset != UNKNOWN_OFFSET) {
                    try {
                        Object[] fetched = fetchRecord(toFetchOffset, untilOffset, pollTimeoutMs);
                        @SuppressWarnings("unchecked")
                        ConsumerRecord<byte[], byte[]> r =
                                (ConsumerRecord<byte[], byte[]>) fetched[0];
                        if (r != null) {
                            return r;
                        }
                        long next = (Long) fetched[1];
                        if (fetched.length == 2) {
                            emit("skipped", obj("partition", tp.partition(),
                                    "from", toFetchOffset, "to", Math.min(next, untilOffset)));
                        }
                        toFetchOffset = next;
                        if (toFetchOffset >= untilOffset) {
                            fetchedData.reset();
                            toFetchOffset = UNKNOWN_OFFSET;
                        }
                    } catch (OffsetOutOfRangeException e) {
                        fetchedData.reset();
                        if (failOnDataLoss) {
                            throw dataLossFailure(toFetchOffset, untilOffset, e);
                        }
                        dataLoss++;
                        long old = toFetchOffset;
                        toFetchOffset = earliestAvailableOffsetBetween(toFetchOffset, untilOffset);
                        long skippedTo = toFetchOffset == UNKNOWN_OFFSET ? untilOffset
                                : toFetchOffset;
                        offsetOutOfRange += skippedTo - old;
                        emit("data_loss", obj("partition", tp.partition(), "from", old,
                                "to", skippedTo, "cause", describe(e)));
                    }
                }
                fetchedData.reset();
                return null;
            }

            QueryFailed dataLossFailure(long start, long end, Throwable cause) {
                dataLoss++;
                return new QueryFailed(obj("error", "data_loss", "topic", tp.topic(),
                        "partition", tp.partition(), "from", start, "until", end,
                        "cause", cause == null ? null : describe(cause),
                        "message", "Cannot fetch offset " + start + " (GroupId: " + groupId
                                + ", TopicPartition: " + tp + "). Some data may have been lost"
                                + " because they are not available in Kafka any more."));
            }

            /** getEarliestAvailableOffsetBetween. */
            long earliestAvailableOffsetBetween(long offset, long untilOffset) {
                long[] range = availableOffsetRange();
                if (offset >= range[1] || range[0] >= untilOffset) {
                    return UNKNOWN_OFFSET;
                } else if (offset >= range[0]) {
                    return offset;
                }
                return range[0];
            }

            /**
             * fetchRecord: {record or null, next offset to fetch}; a third element marks a
             * skip already reported as data loss (not an invisible offset).
             */
            Object[] fetchRecord(long offset, long untilOffset, long pollTimeoutMs) {
                if (offset != fetchedData.nextOffsetInFetchedData) {
                    fetchData(offset, pollTimeoutMs);
                } else if (!fetchedData.records.hasNext()) {
                    if (offset < fetchedData.offsetAfterPoll) {
                        long next = fetchedData.offsetAfterPoll;
                        fetchedData.reset();
                        return new Object[] {null, next};
                    }
                    fetchData(offset, pollTimeoutMs);
                }
                if (!fetchedData.records.hasNext()) {
                    if (offset > fetchedData.offsetAfterPoll) {
                        throw new IllegalStateException("seek to " + offset
                                + " and poll but the offset was reset to "
                                + fetchedData.offsetAfterPoll);
                    }
                    return new Object[] {null, fetchedData.offsetAfterPoll};
                }
                ConsumerRecord<byte[], byte[]> r = fetchedData.next();
                if (r.offset() > offset) {
                    if (fetchedData.availableOffsetRange[0] <= offset) {
                        // `offset` is still there but invisible (a control batch): skip to r.
                        fetchedData.previous();
                        return new Object[] {null, r.offset()};
                    }
                    if (failOnDataLoss) {
                        throw dataLossFailure(offset, r.offset(), null);
                    }
                    dataLoss++;
                    if (r.offset() >= untilOffset) {
                        emit("data_loss", obj("partition", tp.partition(), "from", offset,
                                "to", untilOffset, "cause", null));
                        return new Object[] {null, untilOffset, "data_loss"};
                    }
                    emit("data_loss", obj("partition", tp.partition(), "from", offset,
                            "to", r.offset(), "cause", null));
                    return new Object[] {r, fetchedData.nextOffsetInFetchedData};
                } else if (r.offset() < offset) {
                    throw new IllegalStateException(
                            "Tried to fetch " + offset + " but the returned record offset was "
                                    + r.offset());
                }
                return new Object[] {r, fetchedData.nextOffsetInFetchedData};
            }
        }
    }

    /**
     * ACLs (createAcls, describeAcls, deleteAcls) and SCRAM users
     * (describeUserScramCredentials, alterUserScramCredentials) through the Admin API.
     *
     * <p>An ACL is written RESOURCE_TYPE,NAME,PATTERN_TYPE,PRINCIPAL,HOST,OPERATION,PERMISSION
     * with Kafka's enum names (e.g. TOPIC,orders,LITERAL,User:alice,*,READ,ALLOW); a filter
     * the same, with ANY/MATCH and `null` for any name, principal or host. Several are
     * separated by ';'. A Kafka error is printed as {"error": "ExceptionClass", "message": ...}
     * (exit code 0): the tests check which error a request got.
     */
    static final class Security {
        static final String USAGE =
                "  create-acls BOOTSTRAP ACL[;ACL...] [k=v...]\n"
                + "  describe-acls BOOTSTRAP FILTER [k=v...]\n"
                + "  delete-acls BOOTSTRAP FILTER[;FILTER...] [k=v...]\n"
                + "      ACL: RESOURCE_TYPE,NAME,PATTERN_TYPE,PRINCIPAL,HOST,OPERATION,PERMISSION\n"
                + "      FILTER: the same, ANY/MATCH allowed, null for any name/principal/host\n"
                + "  describe-scram-users BOOTSTRAP [k=v...]\n"
                + "  upsert-scram-user BOOTSTRAP USER SCRAM_SHA_256|SCRAM_SHA_512 ITERATIONS"
                + " PASSWORD [k=v...]\n"
                + "  delete-scram-user BOOTSTRAP USER SCRAM_SHA_256|SCRAM_SHA_512 [k=v...]\n";

        private static String[] fields(String spec) {
            String[] f = spec.split(",", -1);
            if (f.length != 7) {
                throw new UsageException("an ACL or filter has 7 comma-separated fields: " + spec);
            }
            return f;
        }

        private static String nullable(String value) {
            return "null".equals(value) ? null : value;
        }

        static org.apache.kafka.common.acl.AclBindingFilter filter(String spec) {
            String[] f = fields(spec);
            return new org.apache.kafka.common.acl.AclBindingFilter(
                    new org.apache.kafka.common.resource.ResourcePatternFilter(
                            org.apache.kafka.common.resource.ResourceType.valueOf(f[0]),
                            nullable(f[1]),
                            org.apache.kafka.common.resource.PatternType.valueOf(f[2])),
                    new org.apache.kafka.common.acl.AccessControlEntryFilter(
                            nullable(f[3]), nullable(f[4]),
                            org.apache.kafka.common.acl.AclOperation.valueOf(f[5]),
                            org.apache.kafka.common.acl.AclPermissionType.valueOf(f[6])));
        }

        static org.apache.kafka.common.acl.AclBinding binding(String spec) {
            String[] f = fields(spec);
            return new org.apache.kafka.common.acl.AclBinding(
                    new org.apache.kafka.common.resource.ResourcePattern(
                            org.apache.kafka.common.resource.ResourceType.valueOf(f[0]), f[1],
                            org.apache.kafka.common.resource.PatternType.valueOf(f[2])),
                    new org.apache.kafka.common.acl.AccessControlEntry(f[3], f[4],
                            org.apache.kafka.common.acl.AclOperation.valueOf(f[5]),
                            org.apache.kafka.common.acl.AclPermissionType.valueOf(f[6])));
        }

        static String spec(org.apache.kafka.common.acl.AclBinding b) {
            return String.join(",", b.pattern().resourceType().name(), b.pattern().name(),
                    b.pattern().patternType().name(), b.entry().principal(), b.entry().host(),
                    b.entry().operation().name(), b.entry().permissionType().name());
        }

        private static String error(Throwable e) {
            Throwable cause = e instanceof java.util.concurrent.ExecutionException
                    && e.getCause() != null ? e.getCause() : e;
            if (!(cause instanceof org.apache.kafka.common.errors.ApiException)) {
                throw new RuntimeException(cause);
            }
            return "\"error\":" + str(cause.getClass().getSimpleName()) + ",\"message\":"
                    + str(cause.getMessage());
        }

        static int createAcls(String bootstrap, String specs, Properties overrides)
                throws Exception {
            List<org.apache.kafka.common.acl.AclBinding> bindings = new ArrayList<>();
            for (String spec : specs.split(";")) {
                bindings.add(binding(spec));
            }
            try (Admin admin = admin(bootstrap, overrides)) {
                Map<org.apache.kafka.common.acl.AclBinding,
                        org.apache.kafka.common.KafkaFuture<Void>> results =
                        admin.createAcls(bindings).values();
                for (org.apache.kafka.common.acl.AclBinding b : bindings) {
                    String outcome;
                    try {
                        results.get(b).get();
                        outcome = "\"error\":null";
                    } catch (Exception e) {
                        outcome = error(e);
                    }
                    System.out.println("{\"acl\":" + str(spec(b)) + "," + outcome + "}");
                }
            }
            return 0;
        }

        static int describeAcls(String bootstrap, String spec, Properties overrides)
                throws Exception {
            try (Admin admin = admin(bootstrap, overrides)) {
                Collection<org.apache.kafka.common.acl.AclBinding> found;
                try {
                    found = admin.describeAcls(filter(spec)).values().get();
                } catch (Exception e) {
                    System.out.println("{" + error(e) + "}");
                    return 0;
                }
                TreeSet<String> sorted = new TreeSet<>();
                for (org.apache.kafka.common.acl.AclBinding b : found) {
                    sorted.add(spec(b));
                }
                for (String s : sorted) {
                    System.out.println("{\"acl\":" + str(s) + "}");
                }
            }
            return 0;
        }

        static int deleteAcls(String bootstrap, String specs, Properties overrides)
                throws Exception {
            List<org.apache.kafka.common.acl.AclBindingFilter> filters = new ArrayList<>();
            for (String spec : specs.split(";")) {
                filters.add(filter(spec));
            }
            try (Admin admin = admin(bootstrap, overrides)) {
                Map<org.apache.kafka.common.acl.AclBindingFilter,
                        org.apache.kafka.common.KafkaFuture<
                                org.apache.kafka.clients.admin.DeleteAclsResult.FilterResults>>
                        results = admin.deleteAcls(filters).values();
                for (int i = 0; i < filters.size(); i++) {
                    String outcome;
                    try {
                        TreeSet<String> deleted = new TreeSet<>();
                        for (org.apache.kafka.clients.admin.DeleteAclsResult.FilterResult r
                                : results.get(filters.get(i)).get().values()) {
                            if (r.exception() != null) {
                                throw r.exception();
                            }
                            deleted.add(str(spec(r.binding())));
                        }
                        outcome = "\"deleted\":[" + String.join(",", deleted) + "]";
                    } catch (Exception e) {
                        outcome = error(e);
                    }
                    System.out.println("{\"filter\":" + i + "," + outcome + "}");
                }
            }
            return 0;
        }

        static int describeScramUsers(String bootstrap, Properties overrides) throws Exception {
            try (Admin admin = admin(bootstrap, overrides)) {
                Map<String, org.apache.kafka.clients.admin.UserScramCredentialsDescription> users;
                try {
                    users = admin.describeUserScramCredentials().all().get();
                } catch (Exception e) {
                    System.out.println("{" + error(e) + "}");
                    return 0;
                }
                for (String user : new TreeSet<>(users.keySet())) {
                    TreeSet<String> infos = new TreeSet<>();
                    for (org.apache.kafka.clients.admin.ScramCredentialInfo info
                            : users.get(user).credentialInfos()) {
                        infos.add("{\"mechanism\":" + str(info.mechanism().name())
                                + ",\"iterations\":" + info.iterations() + "}");
                    }
                    System.out.println("{\"user\":" + str(user) + ",\"credentials\":["
                            + String.join(",", infos) + "]}");
                }
            }
            return 0;
        }

        private static int alter(String bootstrap, String user,
                org.apache.kafka.clients.admin.UserScramCredentialAlteration alteration,
                Properties overrides) throws Exception {
            try (Admin admin = admin(bootstrap, overrides)) {
                String outcome;
                try {
                    admin.alterUserScramCredentials(List.of(alteration)).all().get();
                    outcome = "\"error\":null";
                } catch (Exception e) {
                    outcome = error(e);
                }
                System.out.println("{\"user\":" + str(user) + "," + outcome + "}");
            }
            return 0;
        }

        static int upsertScramUser(String bootstrap, String user, String mechanism,
                int iterations, String password, Properties overrides) throws Exception {
            return alter(bootstrap, user,
                    new org.apache.kafka.clients.admin.UserScramCredentialUpsertion(user,
                            new org.apache.kafka.clients.admin.ScramCredentialInfo(
                                    org.apache.kafka.clients.admin.ScramMechanism.valueOf(
                                            mechanism), iterations),
                            password),
                    overrides);
        }

        static int deleteScramUser(String bootstrap, String user, String mechanism,
                Properties overrides) throws Exception {
            return alter(bootstrap, user,
                    new org.apache.kafka.clients.admin.UserScramCredentialDeletion(user,
                            org.apache.kafka.clients.admin.ScramMechanism.valueOf(mechanism)),
                    overrides);
        }
    }

    /**
     * Configs (incrementalAlterConfigs, describeConfigs) and log dirs (describeLogDirs)
     * through the Admin API, as Kafka's kafka-configs and kafka-log-dirs call them. A Kafka
     * error is printed as {"error": "ExceptionClass", "message": ...} (exit code 0).
     */
    static final class Configs {
        static final String USAGE =
                "  alter-configs BOOTSTRAP topic|broker|group NAME OP:KEY[=VALUE][;...] [k=v...]\n"
                + "      OP: SET, DELETE, APPEND, SUBTRACT\n"
                + "  describe-configs BOOTSTRAP topic|broker|group NAME [k=v...]\n"
                + "  describe-log-dirs BOOTSTRAP BROKER_ID[,BROKER_ID...] [k=v...]\n"
                + "  alter-replica-log-dirs BOOTSTRAP BROKER_ID TOPIC:PARTITION=DIR[,...] [k=v...]\n";

        private static org.apache.kafka.common.config.ConfigResource resource(
                String type, String name) {
            return new org.apache.kafka.common.config.ConfigResource(
                    org.apache.kafka.common.config.ConfigResource.Type.valueOf(
                            type.toUpperCase(Locale.ROOT)), name);
        }

        private static String error(Throwable e) {
            Throwable cause = e instanceof java.util.concurrent.ExecutionException
                    && e.getCause() != null ? e.getCause() : e;
            if (!(cause instanceof org.apache.kafka.common.errors.ApiException)) {
                throw new RuntimeException(cause);
            }
            return "{\"error\":" + str(cause.getClass().getSimpleName()) + ",\"message\":"
                    + str(cause.getMessage()) + "}";
        }

        static int alter(String bootstrap, String type, String name, String ops,
                Properties overrides) throws Exception {
            List<org.apache.kafka.clients.admin.AlterConfigOp> changes = new ArrayList<>();
            for (String op : ops.split(";")) {
                int colon = op.indexOf(':');
                if (colon < 0) {
                    throw new UsageException("an operation is OP:KEY[=VALUE]: " + op);
                }
                String entry = op.substring(colon + 1);
                int eq = entry.indexOf('=');
                String key = eq < 0 ? entry : entry.substring(0, eq);
                String value = eq < 0 ? null : entry.substring(eq + 1);
                changes.add(new org.apache.kafka.clients.admin.AlterConfigOp(
                        new org.apache.kafka.clients.admin.ConfigEntry(key, value),
                        org.apache.kafka.clients.admin.AlterConfigOp.OpType.valueOf(
                                op.substring(0, colon))));
            }
            try (Admin admin = admin(bootstrap, overrides)) {
                try {
                    admin.incrementalAlterConfigs(
                            Map.of(resource(type, name), changes)).all().get();
                    System.out.println("{\"error\":null}");
                } catch (Exception e) {
                    System.out.println(error(e));
                }
            }
            return 0;
        }

        static int describe(String bootstrap, String type, String name, Properties overrides)
                throws Exception {
            org.apache.kafka.common.config.ConfigResource r = resource(type, name);
            try (Admin admin = admin(bootstrap, overrides)) {
                org.apache.kafka.clients.admin.Config config;
                try {
                    config = admin.describeConfigs(List.of(r),
                            new org.apache.kafka.clients.admin.DescribeConfigsOptions()
                                    .includeSynonyms(true)).all().get().get(r);
                } catch (Exception e) {
                    System.out.println(error(e));
                    return 0;
                }
                for (org.apache.kafka.clients.admin.ConfigEntry entry : config.entries()) {
                    StringBuilder synonyms = new StringBuilder();
                    for (org.apache.kafka.clients.admin.ConfigEntry.ConfigSynonym synonym
                            : entry.synonyms()) {
                        synonyms.append(synonyms.length() == 0 ? "" : ",")
                                .append("[").append(str(synonym.name())).append(",")
                                .append(str(synonym.value())).append(",")
                                .append(str(synonym.source().name())).append("]");
                    }
                    System.out.println("{\"name\":" + str(entry.name())
                            + ",\"value\":" + str(entry.value())
                            + ",\"source\":" + str(entry.source().name())
                            + ",\"readOnly\":" + entry.isReadOnly()
                            + ",\"type\":" + str(entry.type().name())
                            + ",\"synonyms\":[" + synonyms + "]}");
                }
            }
            return 0;
        }

        /** Admin.alterReplicaLogDirs (kafka-reassign-partitions with log directories): one
         *  line per replica, its error class or null. */
        static int alterReplicaLogDirs(String bootstrap, String broker, String moves,
                Properties overrides) throws Exception {
            Map<org.apache.kafka.common.TopicPartitionReplica, String> wanted =
                    new LinkedHashMap<>();
            for (String move : moves.split(",")) {
                String[] parts = move.split("=", 2);
                int colon = parts[0].lastIndexOf(':');
                wanted.put(new org.apache.kafka.common.TopicPartitionReplica(
                        parts[0].substring(0, colon),
                        Integer.parseInt(parts[0].substring(colon + 1)),
                        Integer.parseInt(broker)), parts[1]);
            }
            try (Admin admin = admin(bootstrap, overrides)) {
                Map<org.apache.kafka.common.TopicPartitionReplica,
                        org.apache.kafka.common.KafkaFuture<Void>> results =
                        admin.alterReplicaLogDirs(wanted).values();
                for (Map.Entry<org.apache.kafka.common.TopicPartitionReplica,
                        org.apache.kafka.common.KafkaFuture<Void>> entry : results.entrySet()) {
                    String error = "null";
                    try {
                        entry.getValue().get();
                    } catch (java.util.concurrent.ExecutionException e) {
                        error = str(e.getCause().getClass().getSimpleName());
                    }
                    System.out.println("{\"topic\":" + str(entry.getKey().topic())
                            + ",\"partition\":" + entry.getKey().partition()
                            + ",\"broker\":" + entry.getKey().brokerId()
                            + ",\"error\":" + error + "}");
                }
            }
            return 0;
        }

        static int describeLogDirs(String bootstrap, String brokers, Properties overrides)
                throws Exception {
            List<Integer> ids = new ArrayList<>();
            for (String id : brokers.split(",")) {
                ids.add(Integer.parseInt(id));
            }
            try (Admin admin = admin(bootstrap, overrides)) {
                Map<Integer, Map<String, org.apache.kafka.clients.admin.LogDirDescription>> all;
                try {
                    all = admin.describeLogDirs(ids).allDescriptions().get();
                } catch (Exception e) {
                    System.out.println(error(e));
                    return 0;
                }
                for (Map.Entry<Integer, Map<String,
                        org.apache.kafka.clients.admin.LogDirDescription>> broker
                        : new TreeMap<>(all).entrySet()) {
                    for (Map.Entry<String, org.apache.kafka.clients.admin.LogDirDescription> dir
                            : broker.getValue().entrySet()) {
                        org.apache.kafka.clients.admin.LogDirDescription d = dir.getValue();
                        System.out.println("{\"broker\":" + broker.getKey()
                                + ",\"dir\":" + str(dir.getKey())
                                + ",\"error\":" + (d.error() == null ? "null"
                                        : str(d.error().getClass().getSimpleName()))
                                + ",\"totalBytes\":" + d.totalBytes().orElse(-1L)
                                + ",\"usableBytes\":" + d.usableBytes().orElse(-1L) + "}");
                        for (Map.Entry<TopicPartition,
                                org.apache.kafka.clients.admin.ReplicaInfo> replica
                                : d.replicaInfos().entrySet()) {
                            org.apache.kafka.clients.admin.ReplicaInfo info = replica.getValue();
                            System.out.println("{\"broker\":" + broker.getKey()
                                    + ",\"dir\":" + str(dir.getKey())
                                    + ",\"topic\":" + str(replica.getKey().topic())
                                    + ",\"partition\":" + replica.getKey().partition()
                                    + ",\"size\":" + info.size()
                                    + ",\"offsetLag\":" + info.offsetLag()
                                    + ",\"isFuture\":" + info.isFuture() + "}");
                        }
                    }
                }
            }
            return 0;
        }
    }

    private static final class UsageException extends RuntimeException {
        UsageException(String message) {
            super(message);
        }
    }

    private KafkaTool() {}
}
