package snimtest;

import java.io.IOException;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/** This machine's files under the hdfs:// scheme (hdfs://ANY/x is the local /x). */
public class LocalAsHdfs extends RawLocalFileSystem {
  private URI uri;  // set by initialize (the superclass constructor runs before it)

  @Override
  public void initialize(URI name, Configuration conf) throws IOException {
    super.initialize(name, conf);
    String authority = name.getAuthority() == null ? "localhost:9000" : name.getAuthority();
    uri = URI.create("hdfs://" + authority + "/");
  }

  @Override
  public URI getUri() { return uri == null ? URI.create("hdfs://localhost:9000/") : uri; }

  @Override
  public String getScheme() { return "hdfs"; }

  @Override
  protected void checkPath(Path path) {}

  @Override
  public Path getWorkingDirectory() { return new Path(getUri().toString()); }

  @Override
  public FileStatus getFileStatus(Path f) throws IOException {
    return plain(super.getFileStatus(f));
  }

  @Override
  public FileStatus[] listStatus(Path f) throws IOException {
    FileStatus[] found = super.listStatus(f);
    FileStatus[] out = new FileStatus[found.length];
    for (int i = 0; i < found.length; i++) {
      out[i] = plain(found[i]);
    }
    return out;
  }

  /** The status without the local permission lookup (which needs a file:// URI). */
  private static FileStatus plain(FileStatus s) {
    return new FileStatus(s.getLen(), s.isDirectory(), 1, s.getBlockSize(),
        s.getModificationTime(), s.getPath());
  }
}
