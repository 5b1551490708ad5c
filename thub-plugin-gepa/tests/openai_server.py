"""A minimal OpenAI-compatible chat endpoint serving a local Hugging Face model on CPU (the tests' task
and reflection LM): FastAPI + uvicorn + transformers' ``generate``, ``/v1/models`` and
``/v1/chat/completions`` (what litellm's ``openai/`` provider calls), greedy, non-streaming.

    python openai_server.py --model DIR --port PORT
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from typing import Any

#: a hang guard on the tiny model's answers (tests keep them short)
MAX_NEW_TOKENS = 24


def build_app(model_dir: str) -> Any:
    import torch
    from fastapi import FastAPI
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.eval()
    lock = threading.Lock()  # one generate at a time: litellm sends batches from threads
    app = FastAPI()
    served = {"requests": 0}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "thub-tests"}]}

    @app.get("/stats")
    def stats() -> dict[str, Any]:
        return served

    @app.post("/v1/chat/completions")
    def chat(body: dict[str, Any]) -> dict[str, Any]:
        messages = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
                     else "".join(part.get("text", "") for part in m["content"])} for m in body["messages"]]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)
        limit = min(int(body.get("max_tokens") or body.get("max_completion_tokens") or MAX_NEW_TOKENS),
                    MAX_NEW_TOKENS)
        with lock, torch.no_grad():
            out = model.generate(**ids, max_new_tokens=limit, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        served["requests"] += 1
        new = out[0][ids["input_ids"].shape[1]:]
        text = tokenizer.decode(new, skip_special_tokens=True)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "tiny"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "length" if len(new) >= limit else "stop"}],
            "usage": {"prompt_tokens": int(ids["input_ids"].shape[1]), "completion_tokens": len(new),
                      "total_tokens": int(ids["input_ids"].shape[1]) + len(new)},
        }

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build_app(args.model), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
