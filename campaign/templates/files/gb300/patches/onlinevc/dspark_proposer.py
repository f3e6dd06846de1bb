# Example patch, bind-mounted read-only over vllm/v1/spec_decode/dspark_proposer.py in the
# candidate arm of examples/gb300-dspark-onlinevc.yaml: feeds measured verify step times
# back into the online controller. spec-ab hashes it into manifest.json.
import time


class StepTimer:
    def __init__(self, controller: object) -> None:
        self.controller = controller
        self.t0 = 0.0

    def __enter__(self) -> "StepTimer":
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        ms = (time.perf_counter() - self.t0) * 1000
        observe = getattr(self.controller, "observe", None)
        if observe is not None:
            observe(getattr(self.controller, "last_tokens", 1), ms)
