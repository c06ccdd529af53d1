package harp.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;

import harp.mapred.ClusterSubmitter;
import java.util.ArrayList;
import java.util.List;
import java.util.ServiceLoader;
import org.junit.jupiter.api.Test;

class YarnClusterSubmitterTest {
  @Test
  void theJarRegistersTheYarnSubmitter() {
    List<String> found = new ArrayList<>();
    for (ClusterSubmitter s : ServiceLoader.load(ClusterSubmitter.class, ClusterSubmitter.class.getClassLoader())) {
      found.add(s.name() + "=" + s.getClass().getName());
    }
    assertEquals(List.of("yarn=" + YarnClusterSubmitter.class.getName()), found);
  }
}
