"""On-disk log storage: segments with .index and .timeindex (KIP-33), logs, log manager."""

from storage.clock import Clock, ManualClock, SystemClock
from storage.file_slice import FileSlice

__all__ = ["Clock", "ManualClock", "SystemClock", "FileSlice", "Log", "LogManager",
           "AppendInfo", "FetchDataInfo", "TopicInfo"]


def __getattr__(name):  # lazy: keeps `import storage.errors` free of the heavier modules
    if name in ("Log", "AppendInfo", "FetchDataInfo"):
        from storage import log

        return getattr(log, name)
    if name in ("LogManager", "TopicInfo"):
        from storage import log_manager

        return getattr(log_manager, name)
    raise AttributeError(f"module 'storage' has no attribute {name!r}")
