package harp.mapred;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.security.Credentials;

/**
 * The job secret: the engine authenticates every connection between workers with it, and the
 * YARN master and workers sign their messages with it. It travels only inside the job's
 * {@link Credentials} (a secret key, as MapReduce's shuffle secret does): the client adds it at
 * submission, YARN hands the credentials to the master's container, the master to the workers'.
 * It is never written to job.xml and never sent over the registry connection.
 */
public final class JobSecret {
  /** The secret key's alias in the job's credentials. */
  public static final Text KEY = new Text("harp.job.secret");

  /**
   * Local mode only: the secrets of jobs this JVM runs through LocalJobRunner, by job id. The
   * runner starts a job's thread before it attaches the credentials, so a map task can copy the
   * job's configuration while its credentials are still empty; the tasks run in this JVM and find
   * the secret here instead. Removed when the job is seen complete.
   */
  private static final java.util.Map<String, byte[]> LOCAL = new java.util.concurrent.ConcurrentHashMap<>();

  private JobSecret() {}

  /** Local mode: makes {@code secret} the secret of job {@code jobId} in this JVM. */
  public static void registerLocal(String jobId, byte[] secret) {
    LOCAL.put(jobId, secret.clone());
  }

  /** Local mode: forgets job {@code jobId}'s secret. */
  public static void forgetLocal(String jobId) {
    LOCAL.remove(jobId);
  }

  /** The secret of job {@code jobId}: from {@code creds}, else (local mode) from this JVM. */
  public static byte[] of(Credentials creds, String jobId) {
    byte[] s = of(creds);
    if (s == null && jobId != null) {
      byte[] l = LOCAL.get(jobId);
      s = l == null ? null : l.clone();
    }
    return s;
  }

  /** The secret in {@code creds}, adding a fresh one (32 random bytes, hex) if there is none. */
  public static byte[] ensure(Credentials creds) {
    byte[] s = creds.getSecretKey(KEY);
    if (s == null || s.length == 0) {
      s = randomHex(32).getBytes(StandardCharsets.US_ASCII);
      creds.addSecretKey(KEY, s);
    }
    return s;
  }

  /** The secret in {@code creds}, or null. */
  public static byte[] of(Credentials creds) {
    byte[] s = creds == null ? null : creds.getSecretKey(KEY);
    return s == null || s.length == 0 ? null : s;
  }

  /** {@code bytes} random bytes from SecureRandom, in hex. */
  public static String randomHex(int bytes) {
    byte[] b = new byte[bytes];
    new SecureRandom().nextBytes(b);
    return hex(b);
  }

  /** {@code text} followed by a space and its HMAC-SHA256 under {@code secret} (hex). */
  public static String sign(byte[] secret, String text) {
    return text + " " + hex(mac(secret, text));
  }

  /** The text of a {@link #sign signed} line, or null if the signature does not match. */
  public static String verify(byte[] secret, String line) {
    int sp = line.lastIndexOf(' ');
    if (sp <= 0) {
      return null;
    }
    String text = line.substring(0, sp);
    byte[] want = hex(mac(secret, text)).getBytes(StandardCharsets.US_ASCII);
    byte[] got = line.substring(sp + 1).getBytes(StandardCharsets.US_ASCII);
    return MessageDigest.isEqual(want, got) ? text : null;
  }

  private static byte[] mac(byte[] secret, String text) {
    try {
      Mac m = Mac.getInstance("HmacSHA256");
      m.init(new SecretKeySpec(secret, "HmacSHA256"));
      return m.doFinal(("harp-rs-registry\n" + text).getBytes(StandardCharsets.UTF_8));
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("HmacSHA256 is unavailable", e);
    }
  }

  private static String hex(byte[] b) {
    StringBuilder sb = new StringBuilder(b.length * 2);
    for (byte x : b) {
      sb.append(Character.forDigit((x >> 4) & 15, 16)).append(Character.forDigit(x & 15, 16));
    }
    return sb.toString();
  }
}
