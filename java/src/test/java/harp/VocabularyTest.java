package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.LinkedHashSet;
import java.util.Set;
import java.util.function.Function;
import org.junit.jupiter.api.Test;

/** Every Java constant that crosses the boundary is an engine name, and the other way round. */
class VocabularyTest {
  private static <E extends Enum<E>> void sameNames(String vocabulary, E[] constants, Function<E, String> name) {
    Set<String> java = new LinkedHashSet<>();
    for (E c : constants) {
      java.add(name.apply(c));
      // The engine's parser accepts the name and prints it back unchanged.
      assertEquals(name.apply(c), Native.canonicalName(vocabulary, name.apply(c)), vocabulary + " " + c);
    }
    Set<String> engine = new LinkedHashSet<>(Arrays.asList(Native.names(vocabulary).split("\n")));
    assertEquals(engine, java, vocabulary + ": engine names vs Java constants");
  }

  @Test
  void elementTypes() {
    sameNames("dtype", DType.values(), DType::wireName);
    for (DType d : DType.values()) {
      assertEquals(d, DType.fromWireName(d.wireName()));
    }
  }

  @Test
  void combiners() {
    sameNames("combiner", Combiner.values(), Combiner::wireName);
  }

  @Test
  void keyAndValueTypes() {
    sameNames("key", KeyType.values(), KeyType::wireName);
    List<String> java = new ArrayList<>();
    for (ValueType v : ValueType.values()) {
      java.add(v.wireName());
      assertEquals(v.wireName(), Native.canonicalName("value", v.wireName()));
      assertEquals(v, ValueType.fromWireName(v.wireName()));
    }
    assertEquals(Arrays.asList(Native.names("value").split("\n")), java);
  }

  @Test
  void algorithms() {
    sameNames("broadcast", Algorithm.Broadcast.values(), Algorithm.Broadcast::wireName);
    sameNames("allreduce", Algorithm.Allreduce.values(), Algorithm.Allreduce::wireName);
    sameNames("reduce", Algorithm.Reduce.values(), Algorithm.Reduce::wireName);
  }

  @Test
  void errorKinds() {
    HarpException.Kind[] fromNative = Arrays.stream(HarpException.Kind.values())
        .filter(k -> k != HarpException.Kind.JAVA).toArray(HarpException.Kind[]::new);
    sameNames("error-kind", fromNative, HarpException.Kind::wireName);
    for (HarpException.Kind k : HarpException.Kind.values()) {
      assertEquals(k, HarpException.Kind.fromWireName(k.wireName()));
    }
  }

  @Test
  void collectivesAreTheOperationsErrorsName() {
    assertEquals(Arrays.asList("barrier", "broadcast", "reduce", "gather", "scatter", "allgather", "allreduce",
        "reduce-scatter", "regroup", "push", "pull", "rotate"), Arrays.asList(Native.names("collective").split("\n")));
  }

  /** The job configuration keys of the applications are the engine's, aliases included. */
  @Test
  void applicationKeysAreTheEngines() {
    Set<String> engine = new LinkedHashSet<>(Arrays.asList(Native.names("app-key").split("\n")));
    for (String k : new String[] {KMeans.THREADS, KMeans.CHECKPOINT_EVERY, KMeans.CHECKPOINT_DIR, KMeans.RESUME,
        harp.examples.MapCollectiveJobs.OVERWRITE, harp.examples.kmeans.KMeans.INIT,
        harp.examples.kmeans.KMeans.OUTPUT, harp.examples.kmeans.KMeans.ITERATIONS, harp.examples.kmeans.KMeans.SKIP,
        harp.examples.kmeans.KMeans.PRECISION, harp.examples.wordcount.WordCount.OUTPUT,
        harp.examples.wordcount.WordCount.PARTITIONS}) {
      assertEquals(true, engine.contains(k), k + " in " + engine);
      assertEquals(k, Native.canonicalName("app-key", k));
    }
    assertEquals(harp.examples.kmeans.KMeans.SKIP, Native.canonicalName("app-key", harp.examples.kmeans.KMeans.SKIP_ALIAS));
    assertEquals(harp.examples.kmeans.KMeans.PRECISION,
        Native.canonicalName("app-key", harp.examples.kmeans.KMeans.PRECISION_ALIAS));
    assertEquals(harp.examples.wordcount.WordCount.PARTITIONS,
        Native.canonicalName("app-key", harp.examples.wordcount.WordCount.PARTITIONS_ALIAS));
  }
}
