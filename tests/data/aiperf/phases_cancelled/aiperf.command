/work/main/.venv/bin/aiperf profile --config /tmp/cap2/aiperf-config.yaml
