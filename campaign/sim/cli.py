"""`spec-ab sim serve`: start the simulated lane (the lead mounts `sim_app` as `sim`).

Thin: parse options → `load_config` (precedence in campaign/sim/config.py) → boot → serve.
Exit codes follow campaign/errors.py: 2 for an invalid knob, 3 when the port cannot be
opened or the tokenizer is missing, 0 after SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer

from campaign.errors import EXIT_INFRA, EXIT_USAGE
from campaign.sim.config import ConfigError, load_config
from campaign.sim.vllmlog import Log

sim_app = typer.Typer(help="The simulated speculative-decoding lane (no GPU needed).",
                      no_args_is_help=True, add_completion=False)


@sim_app.callback()
def _group() -> None:
    """The simulated lane: a vLLM-like server over a simulated speculative-decoding MoE."""


@sim_app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port", min=1, max=65535)] = 8000,
    config: Annotated[Path | None, typer.Option("--config", help="YAML file of knobs",
                                                exists=True, dir_okay=False)] = None,
    model: Annotated[str | None, typer.Option(help="served model name")] = None,
    depth: Annotated[int | None, typer.Option(help="draft depth k")] = None,
    verify: Annotated[str | None, typer.Option(help="fixed | adaptive")] = None,
    effect: Annotated[float | None, typer.Option(help="speed factor (ground truth)")] = None,
    time_scale: Annotated[float | None, typer.Option(help="N× faster than real time")] = None,
    seed: Annotated[int | None, typer.Option(help="seed of acceptance/noise")] = None,
    boot_delay: Annotated[float | None, typer.Option(help="seconds before the port opens")]
    = None,
    log_interval: Annotated[float | None, typer.Option(help="seconds between stats lines")]
    = None,
    tokenizer: Annotated[str | None, typer.Option(help="tokenizer folder")] = None,
) -> None:
    """Serve vLLM's OpenAI API, /metrics and /health from the simulated engine."""
    cli = {"model": model, "depth": depth, "verify": verify, "effect": effect,
           "time_scale": time_scale, "seed": seed, "boot_delay": boot_delay,
           "log_interval": log_interval, "tokenizer": tokenizer}
    try:
        cfg = load_config(config_file=config, cli=cli)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc
    from campaign.sim.server import boot, serve_async  # aiohttp: only when serving

    log = Log()
    try:
        sim = boot(cfg, log)
    except FileNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_INFRA) from exc
    try:
        asyncio.run(serve_async(cfg, host, port, log, sim))
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}\n"
                   f"  → pick a free port with --port", err=True)
        raise typer.Exit(EXIT_INFRA) from exc


def main(argv: list[str] | None = None) -> int:
    """`python -m campaign.sim [serve] [options]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "serve":
        args = ["serve", *args]
    try:
        sim_app(args=args, prog_name="python -m campaign.sim")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
