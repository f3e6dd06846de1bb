"""The simulated lane: a vLLM-like OpenAI server over a speculative-decoding MoE model.

Modules, one concept each: `costmodel` (step time, pure), `acceptance` (content class →
draft acceptance), `controller` (adaptive verification), `engine` (continuous batching),
`prefixcache` (vLLM's automatic prefix caching: cached prompt blocks skip prefill),
`telemetry` (Prometheus metrics), `vllmlog` (log line formats), `vocab` (tokenizer),
`config` (knobs and their precedence), `server` (HTTP), `cli` (`spec-ab sim serve`),
`testing` (`running_sim` for tests and other modules).  Knobs: docs/simulator.md.
"""
