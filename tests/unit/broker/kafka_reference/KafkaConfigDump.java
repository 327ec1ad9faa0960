// Prints the config declarations of the Kafka it runs against as JSON: every broker config
// (KafkaConfig.configDef()), every topic config (LogConfig.configDefCopy()) with the broker
// config each falls back to, and which broker configs are dynamic (DynamicBrokerConfig's
// AllDynamicConfigs) and which of those only per broker (its PerBrokerConfigs), and the broker
// quotas (QuotaConfigs.brokerQuotaConfigs(): the replication throttles), dynamic ones too.
//
// Compile and run against a Kafka build's libs (nothing of raftka's tests needs it):
//   javac -cp 'KAFKA/libs/*' -d /tmp/dump KafkaConfigDump.java
//   java -cp "/tmp/dump:KAFKA/libs/*" KafkaConfigDump > kafka39_configs.json
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.common.utils.AppInfoParser;
import org.apache.kafka.server.config.QuotaConfigs;
import org.apache.kafka.server.config.ServerTopicConfigSynonyms;
import org.apache.kafka.storage.internals.log.LogConfig;

public class KafkaConfigDump {
    public static void main(String[] args) throws Exception {
        StringBuilder out = new StringBuilder("{\n");
        out.append("  \"kafka_version\": ").append(q(AppInfoParser.getVersion())).append(",\n");
        out.append("  \"kafka_commit\": ").append(q(AppInfoParser.getCommitId())).append(",\n");
        out.append("  \"generated_by\": ").append(q(
            "java -cp \"$CLASSES:$KAFKA/libs/*\" KafkaConfigDump (tests/unit/broker/kafka_reference/KafkaConfigDump.java)"
        )).append(",\n");

        Set<String> dynamic = javaSet(kafka.server.DynamicBrokerConfig$.MODULE$.AllDynamicConfigs());
        Field perBrokerField = kafka.server.DynamicBrokerConfig$.class.getDeclaredField("PerBrokerConfigs");
        perBrokerField.setAccessible(true);
        Set<String> perBroker = javaSet(perBrokerField.get(kafka.server.DynamicBrokerConfig$.MODULE$));

        out.append("  \"broker\": {\n");
        appendDefs(out, kafka.server.KafkaConfig$.MODULE$.configDef(), dynamic, perBroker);
        out.append("  },\n  \"broker_quota\": {\n");
        // The replication throttles and other broker quotas: dynamic broker configs that
        // KafkaConfig does not declare (DynamicConfig.Broker), settable per broker or as the default.
        ConfigDef quotas = QuotaConfigs.brokerQuotaConfigs();
        appendDefs(out, quotas, quotas.names(), new TreeSet<>());
        out.append("  },\n  \"topic\": {\n");
        appendDefs(out, LogConfig.configDefCopy(), null, null);
        out.append("  },\n  \"topic_synonyms\": {\n");
        List<String> lines = new ArrayList<>();
        for (Map.Entry<String, String> e : new TreeMap<>(ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS).entrySet())
            lines.add("    " + q(e.getKey()) + ": " + q(e.getValue()));
        out.append(String.join(",\n", lines)).append("\n  }\n}\n");
        System.out.print(out);
    }

    static Set<String> javaSet(Object scalaSet) {
        Set<String> names = new TreeSet<>();
        scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) scalaSet).iterator();
        while (it.hasNext()) names.add((String) it.next());
        return names;
    }

    static void appendDefs(StringBuilder out, ConfigDef def, Set<String> dynamic, Set<String> perBroker)
            throws Exception {
        List<String> entries = new ArrayList<>();
        for (ConfigDef.ConfigKey key : new TreeMap<>(def.configKeys()).values()) {
            StringBuilder e = new StringBuilder("    " + q(key.name) + ": {");
            e.append("\"type\": ").append(q(key.type.name()));
            e.append(", \"default\": ").append(defaultJson(key));
            e.append(", \"validator\": ").append(validatorJson(key.validator));
            if (dynamic != null) {
                e.append(", \"dynamic\": ").append(dynamic.contains(key.name));
                e.append(", \"per_broker_only\": ").append(perBroker.contains(key.name));
            }
            entries.add(e.append("}").toString());
        }
        out.append(String.join(",\n", entries)).append("\n");
    }

    static String defaultJson(ConfigDef.ConfigKey key) {
        Object v = key.defaultValue;
        if (v == ConfigDef.NO_DEFAULT_VALUE) return "{\"none\": true}";
        if (v == null) return "null";
        if (v instanceof Password) return q("[hidden]");
        if (v instanceof Class) return q(((Class<?>) v).getName());
        if (v instanceof List) {
            List<String> items = new ArrayList<>();
            for (Object item : (List<?>) v) items.add(String.valueOf(item));
            return q(String.join(",", items));
        }
        if (v instanceof Boolean || v instanceof Integer || v instanceof Long || v instanceof Short)
            return v.toString();
        if (v instanceof Double) return q(v.toString());
        return q(v.toString());
    }

    static Object field(Object o, String name) throws Exception {
        Field f = o.getClass().getDeclaredField(name);
        f.setAccessible(true);
        return f.get(o);
    }

    static String validatorJson(ConfigDef.Validator v) throws Exception {
        if (v == null) return "null";
        String kind = v.getClass().getSimpleName();
        StringBuilder e = new StringBuilder("{\"kind\": " + q(kind));
        if (v instanceof ConfigDef.Range) {
            Object min = field(v, "min"), max = field(v, "max");
            e.append(", \"min\": ").append(min == null ? "null" : q(min.toString()));
            e.append(", \"max\": ").append(max == null ? "null" : q(max.toString()));
        } else if (v instanceof ConfigDef.ValidList) {
            e.append(", \"values\": ").append(strings((Collection<?>) field(field(v, "validString"), "validStrings")));
        } else if (v instanceof ConfigDef.ValidString || v instanceof ConfigDef.CaseInsensitiveValidString) {
            e.append(", \"values\": ").append(strings((Collection<?>) field(v, "validStrings")));
        }
        return e.append(", \"text\": ").append(q(String.valueOf(v))).append("}").toString();
    }

    static String strings(Collection<?> values) {
        List<String> items = new ArrayList<>();
        for (Object item : values) items.add(q(String.valueOf(item)));
        return "[" + String.join(", ", items) + "]";
    }

    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
}
