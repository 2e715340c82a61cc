"""hdfs:// positions for the Spark engine: the driver finds them and reads their footers through
Hadoop's own file system in the session's JVM, as a pyarrow file system (`HadoopFiles`), so
that `io.remote_inputs` finds the files of a prefix or glob by the polars engine's rules and
`io.readers` probes them as it probes objects. No Python library reaches HDFS without a
Hadoop install's libhdfs; the JVM Spark starts has the HDFS client in its jars. Spark then
reads the Parquet files itself. Python tasks on executors have no JVM to ask, so CSV on
hdfs:// is refused (`spark_engine`)."""

from __future__ import annotations

import io
from typing import Any

from py4j.protocol import Py4JJavaError
from pyarrow import PythonFile
from pyarrow.fs import FileInfo, FileSystemHandler, FileType, PyFileSystem
from pyspark.errors.exceptions.captured import CapturedException

from pipeline.io.store.locations import Location

_JAVA_ERRORS = (Py4JJavaError, CapturedException)
"""What a call into the JVM raises (pyspark turns some Java exceptions into its own)."""


def _os_error(path: str, exc: Exception) -> OSError:
    """A Java exception from Hadoop as the OSError pyarrow's file systems raise, so that
    `object_store.store_error` words it (missing, refused, unreachable)."""
    if isinstance(exc, Py4JJavaError):
        java = exc.java_exception
        name = java.getClass().getName()
        text = f"{name}: {java.getMessage()}"
    else:
        name, text = type(exc).__name__, str(exc).splitlines()[0] if str(exc) else ""
    if name.endswith("FileNotFoundException"):
        return FileNotFoundError(2, "path does not exist", path)
    if name.endswith("AccessControlException"):
        return PermissionError(13, f"access denied ({text})", path)
    if name.endswith("ConnectException"):
        return ConnectionRefusedError(111, f"connection refused ({text})", path)
    return OSError(text)


class _JavaStream(io.RawIOBase):
    """A Hadoop FSDataInputStream as a Python binary file (read, seek, tell)."""

    def __init__(self, stream: Any, size: int, path: str):
        self._stream, self._size, self._path = stream, size, path

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = bytes(self._stream.readNBytes(len(buffer)))
        except _JAVA_ERRORS as exc:
            raise _os_error(self._path, exc) from None
        buffer[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        target = {0: 0, 1: self.tell(), 2: self._size}[whence] + offset
        self._stream.seek(target)
        return target

    def tell(self) -> int:
        return int(self._stream.getPos())

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
        super().close()


class HadoopFiles(FileSystemHandler):
    """A Hadoop file system (`SCHEME://AUTHORITY/`) as a pyarrow file system, read-only.

    Paths are named as `Location.store_path` names them, `AUTHORITY/key` ("/key" for the
    default file system's `hdfs:///key`), and come back in the same form."""

    def __init__(self, jvm: Any, conf: Any, scheme: str, authority: str):
        self._jvm = jvm
        self._root = f"{scheme}://{authority}"
        self._authority = authority
        try:
            self._fs = jvm.org.apache.hadoop.fs.FileSystem.get(
                jvm.java.net.URI(self._root + "/"), conf)
        except _JAVA_ERRORS as exc:
            raise _os_error(self._root, exc) from None

    def _hadoop(self, path: str) -> Any:
        key = path[len(self._authority):] if path.startswith(self._authority) else path
        return self._jvm.org.apache.hadoop.fs.Path(f"{self._root}/{key.lstrip('/')}")

    def _info(self, status: Any) -> FileInfo:
        name = f"{self._authority}{status.getPath().toUri().getPath()}"
        if status.isDirectory():
            return FileInfo(name, FileType.Directory)
        return FileInfo(name, FileType.File, size=int(status.getLen()),
                        mtime=int(status.getModificationTime()) / 1000)

    def _status(self, path: str) -> Any:
        try:
            return self._fs.getFileStatus(self._hadoop(path))
        except _JAVA_ERRORS as exc:
            raise _os_error(path, exc) from None

    def get_type_name(self) -> str:
        return f"hadoop+{self._root}"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[FileInfo]:
        infos = []
        for path in paths:
            try:
                infos.append(self._info(self._status(path)))
            except FileNotFoundError:
                infos.append(FileInfo(path, FileType.NotFound))
        return infos

    def get_file_info_selector(self, selector: Any) -> list[FileInfo]:
        """The files below `selector.base_dir` (only files: what `object_store.list_below`
        takes), at any depth when recursive."""
        try:
            self._status(selector.base_dir)
        except FileNotFoundError:
            if selector.allow_not_found:
                return []
            raise
        try:
            found = self._fs.listFiles(self._hadoop(selector.base_dir), selector.recursive)
            infos = []
            while found.hasNext():
                infos.append(self._info(found.next()))
        except _JAVA_ERRORS as exc:
            raise _os_error(selector.base_dir, exc) from None
        return infos

    def open_input_file(self, path: str) -> PythonFile:
        size = int(self._status(path).getLen())
        try:
            stream = self._fs.open(self._hadoop(path))
        except _JAVA_ERRORS as exc:
            raise _os_error(path, exc) from None
        return PythonFile(_JavaStream(stream, size, path), mode="r")

    def open_input_stream(self, path: str) -> PythonFile:
        return self.open_input_file(path)

    def _read_only(self, *_: Any) -> Any:
        raise OSError("snim-batch reads hdfs:// inputs only")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only


def hadoop_filesystems(spark: Any) -> Any:
    """`object_store`'s file system factory for hdfs:// locations, over the JVM of `spark`
    (a session with a JVM in this process, not Spark Connect)."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    made: dict[str, PyFileSystem] = {}

    def filesystem(location: Location) -> PyFileSystem:
        if location.bucket not in made:
            made[location.bucket] = PyFileSystem(HadoopFiles(jvm, conf, "hdfs",
                                                             location.bucket))
        return made[location.bucket]

    return filesystem
