"""Stand-in ``torch`` that reports one CUDA device (tests only: lets R2T2's engine code pass its CUDA check
in a worker subprocess on a machine without a GPU). Never put this on sys.path inside the test process."""

__version__ = "0.0-stand-in"


class cuda:
    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1
