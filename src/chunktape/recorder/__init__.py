"""Recording: an adapter that tees another adapter's streams into a cassette."""

from chunktape.recorder.recording import JournalWriteWarning, RecordingAdapter, StreamViolationWarning

__all__ = ["JournalWriteWarning", "RecordingAdapter", "StreamViolationWarning"]
