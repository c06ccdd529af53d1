package harp.io;

import java.io.DataInput;
import java.io.DataOutput;
import java.io.IOException;
import java.io.InputStream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.WritableComparable;

/** Where a record starts: its file and byte offset (the line number is computed on demand). */
public class FilePosition implements WritableComparable<FilePosition> {
  private String file = "";
  private long offset;

  void set(String file, long offset) {
    this.file = file;
    this.offset = offset;
  }

  public String file() {
    return file;
  }

  public long offset() {
    return offset;
  }

  /** The 1-based line number of this position (reads the file up to it: use for error messages). */
  public long line(Configuration conf) throws IOException {
    Path p = new Path(file);
    long lines = 1;
    try (InputStream in = p.getFileSystem(conf).open(p)) {
      byte[] buf = new byte[1 << 16];
      long left = offset;
      while (left > 0) {
        int n = in.read(buf, 0, (int) Math.min(buf.length, left));
        if (n < 0) {
          break;
        }
        for (int i = 0; i < n; i++) {
          if (buf[i] == '\n') {
            lines++;
          }
        }
        left -= n;
      }
    }
    return lines;
  }

  @Override
  public void write(DataOutput out) throws IOException {
    out.writeUTF(file);
    out.writeLong(offset);
  }

  @Override
  public void readFields(DataInput in) throws IOException {
    file = in.readUTF();
    offset = in.readLong();
  }

  @Override
  public int compareTo(FilePosition o) {
    int c = file.compareTo(o.file);
    return c != 0 ? c : Long.compare(offset, o.offset);
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof FilePosition && compareTo((FilePosition) o) == 0;
  }

  @Override
  public int hashCode() {
    return file.hashCode() * 31 + Long.hashCode(offset);
  }

  @Override
  public String toString() {
    return file + "@" + offset;
  }
}
