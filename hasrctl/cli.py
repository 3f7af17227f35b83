"""hasrctl: the command line of hasr (click).

Only light modules load at start (click, socket, hasrd.config/errors/formats): ``hasrctl status`` has a
150 ms budget, so each command's module is imported only when that command runs.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from hasrctl.client import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError
from hasrctl.common import say
from hasrd import __version__

EPILOG = """\b
Exit codes: 0 ok, 1 transcription (or the command) failed, 2 bad usage or input, 3 daemon unreachable.
Every option takes a default from the HASR_* variable shown in its help; HASR_DEBUG=1 shows tracebacks.

\b
Shell completion (add to your shell's rc file):
  bash: eval "$(_HASRCTL_COMPLETE=bash_source hasrctl)"
  zsh:  eval "$(_HASRCTL_COMPLETE=zsh_source hasrctl)"
  fish: _HASRCTL_COMPLETE=fish_source hasrctl | source
"""


class LazyGroup(click.Group):
    """Imports a command's module only when that command runs (or help lists them): status stays fast."""

    COMMANDS = {"transcribe": "hasrctl.commands:transcribe", "status": "hasrctl.status:status",
                "load": "hasrctl.commands:load", "unload": "hasrctl.commands:unload",
                "stop": "hasrctl.commands:stop", "doctor": "hasrctl.doctor:doctor",
                "setup": "hasrctl.install:setup", "eval": "hasrctl.evalcmd:eval_command",
                "listen": "hasrctl.live:listen", "dictate": "hasrctl.live:dictate", "ps": "hasrctl.pool:ps",
                "models": "hasrctl.pool:models", "pull": "hasrctl.pool:pull", "rm": "hasrctl.pool:rm",
                "batch": "hasrctl.batch.command:batch"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        spec = self.COMMANDS.get(name)
        if spec is None:
            return None
        module, _, attr = spec.partition(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command


@click.group(cls=LazyGroup, epilog=EPILOG,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, message="hasrctl %(version)s")
def cli() -> None:
    """Drive hasr, the local speech-to-text daemon.

    \b
    Examples:
      hasrctl transcribe meeting.wav                 # the text on stdout
      hasrctl transcribe -f srt -o subs/ *.mp3       # subs/NAME.srt for each file
      arecord -f S16_LE -d 5 | hasrctl transcribe -  # audio from stdin
      hasrctl transcribe --stream talk.flac          # live draft, replaced by final sentences
      hasrctl listen                                 # the microphone, live
      hasrctl dictate --toggle                       # type what you say (bind it to a shortcut)
      hasrctl status --watch                         # follow the daemon's state
      hasrctl ps                                     # the workers: model, CPU/GPU, memory, until when
      hasrctl transcribe --model large-v3 talk.wav   # another installed model (hasrctl models lists them)
      hasrctl pull large-v3                          # download a model (resumable, sha256-checked)
      hasrctl pull ~/usb/faster-whisper-large-v3     # import a model directory (no hub needed)
      hasrctl rm large-v3                            # remove a downloaded model
      hasrctl doctor                                 # what is missing, and how to fix it
      hasrctl batch ~/recordings -o ~/transcripts    # an archive on Ray (resumable; a cluster: --address)
    """


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one-line errors, exit codes 0/1/2/3."""
    debug = os.environ.get("HASR_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")
    try:
        rv = cli.main(args=argv, prog_name="hasrctl", standalone_mode=False)
        code = rv if isinstance(rv, int) else EXIT_OK
    except click.ClickException as e:
        e.show()
        code = EXIT_USAGE
    except click.exceptions.Exit as e:
        code = e.exit_code
    except click.Abort:
        say("aborted")
        code = 130
    except CliError as e:
        if debug:
            import traceback

            traceback.print_exc()
        say(e.message)
        code = e.exit_code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # The reader went away (hasrctl ... | head): not an error of ours; keep Python from complaining.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = EXIT_OK
    except Exception as e:  # noqa: BLE001 - the one place that turns surprises into one line
        if debug:
            raise
        say(f"internal error: {type(e).__name__}: {e} (HASR_DEBUG=1 shows the traceback)")
        code = EXIT_FAILED
    sys.exit(code)

