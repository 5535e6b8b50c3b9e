"""Recording: an adapter that tees another adapter's streams into a cassette."""

from chunktape.recorder.recording import RecordingAdapter, StreamViolationWarning

__all__ = ["RecordingAdapter", "StreamViolationWarning"]
