"""The floor: a bare ASGI app under uvicorn (uvloop, httptools, as mlserve) that
reads the request and answers a fixed V2 response. Nothing can be faster in Python."""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

BODY = (
    b'{"id":"1","model_name":"echo","outputs":[{"name":"output-0","datatype":"FP32",'
    b'"shape":[1,4],"data":[1.0,2.0,3.0,4.0]}]}'
)
HEADERS = [(b"content-type", b"application/json")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


if __name__ == "__main__":
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        loop="uvloop",
        http="httptools",
        access_log=False,
        lifespan="off",
    )
