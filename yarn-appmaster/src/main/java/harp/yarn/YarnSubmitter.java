package harp.yarn;

import harp.mapred.JobSecret;
import java.io.Closeable;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Method;
import java.net.URISyntaxException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.IOUtils;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapreduce.Cluster;
import org.apache.hadoop.mapreduce.Counters;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.JobPriority;
import org.apache.hadoop.mapreduce.JobStatus;
import org.apache.hadoop.mapreduce.TaskCompletionEvent;
import org.apache.hadoop.mapreduce.TaskReport;
import org.apache.hadoop.mapreduce.protocol.ClientProtocol;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.authorize.AccessControlList;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.YarnApplicationState;

/**
 * The client side of map-collective jobs on YARN, behind Hadoop's {@link ClientProtocol} (so
 * {@code Job.submit()} and {@code waitForCompletion} work as for any job, through Hadoop's own
 * job submitter): a new job id is a new YARN application; submitting ships our jar and the
 * native library into the job's staging directory, writes the usable node list, and submits our
 * {@link AppMaster} with {@value LaunchSpec#AM_MAX_ATTEMPTS} attempts (default 2: YARN kills
 * every container of a failed attempt, and the next attempt starts all workers again, with
 * {@code harp.resume} on so that they continue from the last complete checkpoint); status,
 * progress, diagnostics and kill map to the application; counters are the workers' summed
 * counters left by the master. The ResourceManager is reached only through {@link Rm}.
 */
public final class YarnSubmitter implements InvocationHandler {
  /** Test seam: class name of an {@link Rm} factory ({@code Rm create(Configuration)} static method). */
  public static final String RM_FACTORY = "harp.yarn.rm.factory";
  public static final String APPLICATION_TYPE = "MAP-COLLECTIVE";

  /** What the client needs from the ResourceManager. */
  public interface Rm extends Closeable {
    ApplicationId newApplication() throws IOException;

    /** The NodeManagers that can run containers now (a host listed twice counts once). */
    List<Node> runningNodes() throws IOException;

    /** Every application of our type the ResourceManager knows. */
    List<App> applications() throws IOException;

    void submit(ApplicationSubmissionContext ctx) throws IOException;

    AppState report(ApplicationId id) throws IOException;

    void kill(ApplicationId id) throws IOException;
  }

  /** A usable node and its rack as YARN names it ("/default-rack" unless the cluster maps racks). */
  public static final class Node extends Value {
    private final String host;
    private final String rack;

    public Node(String host, String rack) {
      this.host = host;
      this.rack = rack;
    }

    public String host() {
      return host;
    }

    public String rack() {
      return rack;
    }

    @Override
    Object[] fields() {
      return new Object[] {host, rack};
    }

    @Override
    String[] names() {
      return new String[] {"host", "rack"};
    }
  }

  /** An application as {@code mapred job -list} shows it. */
  public static final class App extends Value {
    private final ApplicationId id;
    private final String name;
    private final String user;
    private final String queue;
    private final AppState state;

    public App(ApplicationId id, String name, String user, String queue, AppState state) {
      this.id = id;
      this.name = name;
      this.user = user;
      this.queue = queue;
      this.state = state;
    }

    public ApplicationId id() {
      return id;
    }

    public String name() {
      return name;
    }

    public String user() {
      return user;
    }

    public String queue() {
      return queue;
    }

    public AppState state() {
      return state;
    }

    @Override
    Object[] fields() {
      return new Object[] {id, name, user, queue, state};
    }

    @Override
    String[] names() {
      return new String[] {"id", "name", "user", "queue", "state"};
    }
  }

  /** An application's state as the client reports it. */
  public static final class AppState extends Value {
    private final YarnApplicationState state;
    private final FinalApplicationStatus finalStatus;
    private final float progress;
    private final String diagnostics;
    private final String trackingUrl;
    private final long startTime;
    private final long finishTime;

    public AppState(YarnApplicationState state, FinalApplicationStatus finalStatus, float progress, String diagnostics, String trackingUrl, long startTime, long finishTime) {
      this.state = state;
      this.finalStatus = finalStatus;
      this.progress = progress;
      this.diagnostics = diagnostics;
      this.trackingUrl = trackingUrl;
      this.startTime = startTime;
      this.finishTime = finishTime;
    }

    public YarnApplicationState state() {
      return state;
    }

    public FinalApplicationStatus finalStatus() {
      return finalStatus;
    }

    public float progress() {
      return progress;
    }

    public String diagnostics() {
      return diagnostics;
    }

    public String trackingUrl() {
      return trackingUrl;
    }

    public long startTime() {
      return startTime;
    }

    public long finishTime() {
      return finishTime;
    }

    @Override
    Object[] fields() {
      return new Object[] {state, finalStatus, progress, diagnostics, trackingUrl, startTime, finishTime};
    }

    @Override
    String[] names() {
      return new String[] {"state", "finalStatus", "progress", "diagnostics", "trackingUrl", "startTime", "finishTime"};
    }
  }

  private final Configuration conf;
  private final Rm rm;
  private final Map<JobID, Path> jobDirs = new ConcurrentHashMap<>();
  /** Final counters, kept once read (the master's file is removed then). */
  private final Map<JobID, Counters> finalCounters = new ConcurrentHashMap<>();
  /** The progress last seen while a job ran (a failed or killed job keeps it). */
  private final Map<JobID, Float> lastProgress = new ConcurrentHashMap<>();

  public YarnSubmitter(Configuration conf, Rm rm) {
    this.conf = conf;
    this.rm = rm;
  }

  /** The protocol for {@code conf}: the real ResourceManager, or the factory named by {@link #RM_FACTORY}. */
  public static ClientProtocol create(Configuration conf) throws IOException {
    Rm rm;
    String factory = conf.get(RM_FACTORY);
    if (factory == null) {
      rm = new YarnRm(conf);
    } else {
      try {
        rm = (Rm) conf.getClassByName(factory).getMethod("create", Configuration.class).invoke(null, conf);
      } catch (ReflectiveOperationException e) {
        throw new IOException("cannot create the ResourceManager client " + factory + ": " + e, e);
      }
    }
    return (ClientProtocol) java.lang.reflect.Proxy.newProxyInstance(ClientProtocol.class.getClassLoader(),
        new Class<?>[] {ClientProtocol.class, Closeable.class}, new YarnSubmitter(conf, rm));
  }

  static ApplicationId appId(JobID job) {
    return ApplicationId.newInstance(Long.parseLong(job.getJtIdentifier()), job.getId());
  }

  @Override
  public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
    String m = method.getName();
    switch (m) {
      case "getNewJobID": {
        ApplicationId id = rm.newApplication();
        return new JobID(Long.toString(id.getClusterTimestamp()), id.getId());
      }
      case "submitJob":
        return submit((JobID) args[0], new Path((String) args[1]), (Credentials) args[2]);
      case "getJobStatus":
        return status((JobID) args[0]);
      case "killJob":
        kill((JobID) args[0]);
        return null;
      case "getAllJobs":
        return allJobs();
      case "getJobCounters":
        return counters((JobID) args[0]);
      case "getStagingAreaDir":
        return stagingArea().toString();
      case "getSystemDir":
        return new Path(conf.get("mapreduce.jobtracker.system.dir", "/tmp/hadoop/mapred/system")).toString();
      case "getFilesystemName":
        return FileSystem.get(conf).getUri().toString();
      case "getQueueAdmins":
        return new AccessControlList(" ");
      case "getJobTrackerStatus":
        return Cluster.JobTrackerStatus.RUNNING;
      case "getTaskTrackerExpiryInterval":
        return 0L;
      case "getTaskCompletionEvents":
        return new TaskCompletionEvent[0];
      case "getTaskReports":
        return new TaskReport[0];
      case "getTaskDiagnostics":
        return new String[0];
      case "getJobHistoryDir":
        return "";
      case "getDelegationToken":
      case "getLogFileParams":
        return null;
      case "renewDelegationToken":
        return 0L;
      case "cancelDelegationToken":
        return null;
      case "getProtocolVersion":
        return ClientProtocol.versionID;
      case "close":
        rm.close();
        return null;
      case "toString":
        return "map-collective YARN client";
      case "hashCode":
        return System.identityHashCode(proxy);
      case "equals":
        return proxy == args[0];
      default:
        throw new UnsupportedOperationException(m + " is not supported for map-collective jobs");
    }
  }

  /** Where the job submitter puts job directories (as MapReduce on YARN does). */
  private Path stagingArea() throws IOException {
    String user = UserGroupInformation.getCurrentUser().getShortUserName();
    Path p = new Path(conf.get("yarn.app.mapreduce.am.staging-dir", "/tmp/hadoop-yarn/staging"), user + "/.staging");
    return p.getFileSystem(conf).makeQualified(p);
  }

  /** A job's directory: as submitted by this client, else where the job submitter puts it. */
  private Path jobDir(JobID job) throws IOException {
    Path d = jobDirs.get(job);
    return d != null ? d : new Path(stagingArea(), job.toString());
  }

  private JobStatus submit(JobID job, Path jobDir, Credentials creds) throws IOException {
    FileSystem fs = jobDir.getFileSystem(conf);
    // The job secret goes to the master (and from it to the workers) inside the credentials only.
    JobSecret.ensure(creds);
    JobConf jobConf = new JobConf(false);
    try (FSDataInputStream in = fs.open(new Path(jobDir, LaunchSpec.JOB_XML))) {
      jobConf.addResource(in);
      jobConf.size(); // parse now, while the stream is open
    }
    Path harp = new Path(jobDir, LaunchSpec.HARP_DIR);
    fs.mkdirs(harp);
    fs.copyFromLocalFile(false, true, new Path(ourJar().toURI()), new Path(harp, LaunchSpec.HARP_JAR));
    // Every container loads the library of its own platform from our jar, unless the client
    // names one (-Dharp.native.lib): then that file goes to every container instead.
    try (InputStream lib = chosenNativeLibrary()) {
      if (lib != null) {
        try (FSDataOutputStream out = fs.create(new Path(harp, LaunchSpec.NATIVE_LIB), true)) {
          IOUtils.copyBytes(lib, out, 1 << 16);
        }
      }
    }
    StringBuilder nodes = new StringBuilder();
    java.util.Set<String> seen = new java.util.HashSet<>();
    for (Node n : rm.runningNodes()) {
      if (n.host() != null && !n.host().isEmpty() && seen.add(n.host())) {
        nodes.append(n.host()).append(' ').append(n.rack() == null || n.rack().isEmpty() ? "/default-rack" : n.rack())
            .append('\n');
      }
    }
    if (seen.isEmpty()) {
      throw new IOException("the YARN cluster has no running NodeManagers");
    }
    try (FSDataOutputStream out = fs.create(new Path(harp, LaunchSpec.NODES_FILE), true)) {
      out.write(nodes.toString().getBytes(StandardCharsets.UTF_8));
    }
    ByteBuffer tokens = AppMaster.serialize(creds);
    ApplicationId app = appId(job);
    ApplicationSubmissionContext ctx = ApplicationSubmissionContext.newInstance(app,
        jobConf.get("mapreduce.job.name", "map-collective job"), jobConf.get("mapreduce.job.queuename", "default"),
        Priority.newInstance(0), LaunchSpec.master(jobConf, jobDir, tokens), false, true,
        LaunchSpec.maxAttempts(jobConf),
        Resource.newInstance(jobConf.getInt(LaunchSpec.AM_MEMORY_MB, 1024), jobConf.getInt(LaunchSpec.AM_VCORES, 1)),
        APPLICATION_TYPE);
    jobDirs.put(job, jobDir);
    rm.submit(ctx);
    return status(job);
  }

  /**
   * The jar that holds our classes (shipped to every container). Under {@code hadoop jar}, Hadoop's
   * RunJar unpacks the job jar and puts the unpacked directory first on the classpath, so the
   * class's own code source is a directory; like Hadoop's {@code ClassUtil.findContainingJar}, we
   * look for the class file among every copy the class loader can see and take the first in a jar.
   */
  static File ourJar() throws IOException {
    return containingJar(AppMaster.class);
  }

  static File containingJar(Class<?> c) throws IOException {
    String resource = c.getName().replace('.', '/') + ".class";
    ClassLoader loader = c.getClassLoader() == null ? ClassLoader.getSystemClassLoader() : c.getClassLoader();
    List<String> seen = new java.util.ArrayList<>();
    for (java.util.Enumeration<java.net.URL> e = loader.getResources(resource); e.hasMoreElements();) {
      java.net.URL u = e.nextElement();
      seen.add(u.toString());
      if (u.getProtocol().equals("jar")) {
        String path = u.getPath(); // file:/x/y.jar!/harp/yarn/AppMaster.class
        int bang = path.indexOf("!/");
        try {
          File f = new File(new java.net.URI(bang < 0 ? path : path.substring(0, bang)));
          if (f.isFile()) {
            return f;
          }
        } catch (URISyntaxException | IllegalArgumentException ex) {
          // not a local jar: keep looking
        }
      }
    }
    throw new IOException("no jar on the classpath contains the Harp-RS classes (" + resource + " found at "
        + (seen.isEmpty() ? "nowhere" : String.join(", ", seen)) + "); run the job from harp-rs.jar, "
        + "harp-rs-examples.jar or a jar that contains them");
  }

  /**
   * The native library the client names for the cluster ({@code -Dharp.native.lib=FILE}), or null:
   * then each container loads its own platform's copy from our jar (linux-x86_64, linux-aarch64).
   */
  static InputStream chosenNativeLibrary() throws IOException {
    String explicit = System.getProperty(harp.Native.LIBRARY_PROPERTY);
    if (explicit == null || explicit.isEmpty()) {
      return null;
    }
    try {
      return new java.io.FileInputStream(explicit);
    } catch (java.io.FileNotFoundException e) {
      throw new IOException("cannot read the native library named by " + harp.Native.LIBRARY_PROPERTY + ": "
          + explicit, e);
    }
  }

  /** The job's state for an application's YARN state and final status. */
  static JobStatus.State jobState(AppState s) {
    switch (s.state()) {
      case NEW:
      case NEW_SAVING:
      case SUBMITTED:
      case ACCEPTED:
        return JobStatus.State.PREP;
      case RUNNING:
        return JobStatus.State.RUNNING;
      case FAILED:
        return JobStatus.State.FAILED;
      case KILLED:
        return JobStatus.State.KILLED;
      case FINISHED:
        switch (s.finalStatus()) {
          case SUCCEEDED:
            return JobStatus.State.SUCCEEDED;
          case KILLED:
            return JobStatus.State.KILLED;
          default:
            return JobStatus.State.FAILED;
        }
      default:
        throw new IllegalStateException("unknown YARN application state " + s.state());
    }
  }

  private JobStatus status(JobID job) throws IOException {
    return status(job, rm.report(appId(job)), UserGroupInformation.getCurrentUser().getShortUserName(), job.toString());
  }

  private Status status(JobID job, AppState s, String user, String name) throws IOException {
    JobStatus.State state = jobState(s);
    boolean done = state == JobStatus.State.SUCCEEDED;
    boolean ended = done || state == JobStatus.State.FAILED || state == JobStatus.State.KILLED;
    // A map-only job: map progress is the master's (kept as it was when the job failed or was
    // killed, never 100 % then); reduce progress stays 0 as for any job without reduces.
    float map = done ? 1f : ended ? lastProgress.getOrDefault(job, 0f) : s.progress();
    if (!ended) {
      lastProgress.put(job, s.progress());
    }
    Path dir = jobDir(job);
    if (ended && jobDirs.containsKey(job)) {
      removeStaging(dir);
    }
    Status st = new Status(job, 1f, map, 0f, done ? 1f : 0f, state, JobPriority.NORMAL, user, name,
        new Path(dir, LaunchSpec.JOB_XML).toString(), s.trackingUrl() == null ? "" : s.trackingUrl());
    st.set(s.diagnostics() == null ? "" : s.diagnostics(), s.startTime(), s.finishTime());
    return st;
  }

  /**
   * Removes a finished job's staging directory if it is still there (the master removes it at
   * every ending it lives to see; not when it was killed with SIGKILL or crashed). The counters
   * file next to it stays until read.
   */
  private void removeStaging(Path dir) {
    try {
      FileSystem fs = dir.getFileSystem(conf);
      if (fs.exists(dir)) {
        fs.delete(dir, true);
      }
    } catch (IOException e) {
      System.err.println("harp: cannot remove the staging directory " + dir + ": " + e);
    }
  }

  /** Kills the application, waits (at most 10 s) until YARN reports it ended, cleans up. */
  private void kill(JobID job) throws IOException, InterruptedException {
    ApplicationId app = appId(job);
    rm.kill(app);
    long until = System.currentTimeMillis() + 10_000;
    while (System.currentTimeMillis() < until) {
      YarnApplicationState st = rm.report(app).state();
      if (st == YarnApplicationState.KILLED || st == YarnApplicationState.FAILED
          || st == YarnApplicationState.FINISHED) {
        break;
      }
      Thread.sleep(100);
    }
    removeStaging(jobDir(job));
  }

  /** Every map-collective application, as {@code mapred job -list} wants it. */
  private JobStatus[] allJobs() throws IOException {
    List<JobStatus> out = new java.util.ArrayList<>();
    for (App a : rm.applications()) {
      JobID job = new JobID(Long.toString(a.id().getClusterTimestamp()), a.id().getId());
      Status st = status(job, a.state(), a.user(), a.name());
      st.queue(a.queue());
      out.add(st);
    }
    return out.toArray(new JobStatus[0]);
  }

  /** A JobStatus whose failure info and times can be set (the setters are protected). */
  static final class Status extends JobStatus {
    Status(JobID id, float setup, float map, float reduce, float cleanup, State state, JobPriority prio, String user,
        String name, String jobFile, String url) {
      super(id, setup, map, reduce, cleanup, state, prio, user, name, jobFile, url);
    }

    void queue(String q) {
      setQueue(q == null ? "default" : q);
    }

    void set(String failure, long start, long finish) {
      setFailureInfo(failure);
      setStartTime(start);
      setFinishTime(finish);
    }
  }

  /** The summed worker counters the master left next to the job directory (removed once read). */
  private Counters counters(JobID job) throws IOException {
    Path dir = jobDir(job);
    Counters kept = finalCounters.get(job);
    if (kept != null) {
      return kept;
    }
    Path f = AppMaster.countersFile(dir);
    FileSystem fs = f.getFileSystem(conf);
    if (!fs.exists(f)) {
      return null;
    }
    Counters c = new Counters();
    try (FSDataInputStream in = fs.open(f)) {
      c.readFields(in);
    }
    if (status(job).isJobComplete()) {
      finalCounters.put(job, c);
      fs.delete(f, false);
    }
    return c;
  }
}
