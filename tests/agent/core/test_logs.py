"""JSON logs: one parseable object per line with the fixed keys and the caller's fields."""

from __future__ import annotations

import io
import json
import logging

from berth_agent.core.logs import setup_json_logging


def test_one_json_line_per_call():
    stream = io.StringIO()
    handler = setup_json_logging("info", stream=stream)
    try:
        logging.getLogger("berth_agent.pipeline").info(
            "config applied", extra={"fields": {"config_hash": "abc", "generation": 3, "msg": "clash"}}
        )
        logging.getLogger("berth_agent.pipeline").debug("below the level")
        try:
            raise ValueError("bad input")
        except ValueError:
            logging.getLogger("x").exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["level"] == "info" and first["logger"] == "berth_agent.pipeline"
    assert first["msg"] == "config applied"  # a field never overwrites the fixed keys
    assert first["config_hash"] == "abc" and first["generation"] == 3 and first["field_msg"] == "clash"
    assert first["time"].endswith("Z") and "T" in first["time"]
    second = json.loads(lines[1])
    assert second["exception"] == "ValueError: bad input"
    assert "Traceback" not in lines[1]


def test_setup_twice_keeps_one_handler():
    stream = io.StringIO()
    first = setup_json_logging("info", stream=io.StringIO())
    second = setup_json_logging("info", stream=stream)
    try:
        assert first not in logging.getLogger().handlers
        logging.getLogger("t").warning("once")
        assert len(stream.getvalue().splitlines()) == 1
    finally:
        logging.getLogger().removeHandler(second)
