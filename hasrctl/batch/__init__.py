"""``hasrctl batch``: an archive of recordings transcribed on Ray (docs/BATCH.md).

One file, one role:

- ``inputs.py``    what to transcribe: files, directories (audio/video by content), globs, ``@list`` files,
                   and where each transcript goes (the input tree mirrored under OUTDIR);
- ``manifest.py``  ``OUTDIR/manifest.jsonl``: one row per input, merged from a journal, rewritten atomically;
                   which inputs a rerun may skip (pure rules);
- ``actor.py``     the Ray actor: the daemon's own engine, loaded once, decoding and transcribing one file per
                   call, returning the rendered transcripts;
- ``progress.py``  files done / total, audio hours, real-time factor and ETA on stderr;
- ``run.py``       Ray itself: a local instance or a cluster, the Ray Data pipeline, results as they come;
- ``store.py``     a finished input's outputs and kept result written, its row recorded; formats asked later
                   rendered from kept results;
- ``command.py``   the click command and its exit status.

Nothing here imports Ray, faster-whisper or numpy at module level: ``hasrctl --help`` stays fast, and a
machine without the ``batch`` extra gets a clear message when the command runs.
"""
