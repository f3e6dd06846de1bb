# Example patch, bind-mounted read-only over vllm/v1/spec_decode/verify_controller.py in
# the candidate arm of examples/gb300-dspark-onlinevc.yaml. In a real campaign this is
# your patched copy of the file; spec-ab records its sha256 in manifest.json so a result
# always names the exact code it measured.
import os

ONLINE = os.environ.get("VLLM_DSPARK_ONLINE_VC") == "1"


class VerifyController:
    """Choose how many drafts to verify from a cost table indexed by token count."""

    def __init__(self, cost_ms: dict[int, float]) -> None:
        self.cost_ms = dict(cost_ms)

    def observe(self, tokens: int, ms: float) -> None:
        if ONLINE:  # keep the table live: exponential moving average per token count
            old = self.cost_ms.get(tokens, ms)
            self.cost_ms[tokens] = 0.9 * old + 0.1 * ms

    def choose(self, survival: list[float], base_tokens: int) -> int:
        best, best_rate = 0, 0.0
        expected = 1.0
        for k, p in enumerate([1.0, *survival]):
            expected += p if k else 0.0
            cost = self.cost_ms.get(base_tokens + k, float("inf"))
            if cost and expected / cost > best_rate:
                best, best_rate = k, expected / cost
        return best
