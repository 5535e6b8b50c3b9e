"""The loopback servers: the replay server (``ReplayServer``, ``serve``) and the recording proxy, with what they
share: the socket they listen on, the limits they enforce, the uvicorn server they run and their own errors."""
