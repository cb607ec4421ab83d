"""The baseline for bench/api.py: a bare FastAPI app that only echoes, no database."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

app = FastAPI()


@app.post("/echo", status_code=202)
def echo(body: dict[str, Any]) -> dict[str, Any]:
    return {"id": "x", **body}


@app.get("/echo/{item_id}")
def get(item_id: str) -> dict[str, str]:
    return {"id": item_id}
