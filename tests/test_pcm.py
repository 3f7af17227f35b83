"""PCM buffers handed to the worker: released even when a request dies early; 0600 file fallback."""

from __future__ import annotations


def test_a_pcm_buffer_nobody_closed_is_released_when_dropped() -> None:
    import gc
    import os

    import numpy as np

    from hasrd.pcm import PcmBuffer

    buf = PcmBuffer.from_array(np.zeros(10, dtype=np.float32))
    fd = buf.fd
    os.fstat(fd)
    del buf
    gc.collect()
    try:
        os.fstat(fd)
        still_open = True
    except OSError:
        still_open = False
    assert not still_open
    file_buf = PcmBuffer.from_array(np.zeros(10, dtype=np.float32), private_dir="/tmp", use_memfd=False)
    path = file_buf.path
    assert path and os.stat(path).st_mode & 0o777 == 0o600
    file_buf.close()
    file_buf.close()  # idempotent
    assert not os.path.exists(path)
