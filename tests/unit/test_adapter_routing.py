"""The multi-LoRA server's routing (serving/adapter_servers.py) over a stand-in for verl's server:
each request reaches vLLM's engine with its own adapter's `LoRARequest`, concurrent requests of
different adapters included, and the cache salt of its adapter's version; a reload replaces the
adapter in place under the same id, also while requests run; responses carry their adapter's step
when they arrived. The real server is run in tests/integration/test_trainer_vllm_cpu.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm", reason="the vLLM path needs vllm-cpu (scripts/setup_vllm.sh)")

from verl_masopd.serving.adapter_policies import AdapterClient  # noqa: E402
from verl_masopd.serving.adapter_servers import AdapterRouting  # noqa: E402


class StandInEngine:
    """vLLM's engine client: what was loaded, and the LoRA request each generation ran with."""

    def __init__(self):
        self.added = []
        self.served = {}
        self.salts = {}

    async def add_lora(self, request) -> bool:
        self.added.append(request)
        return True

    async def generate(self, prompt, request_id, lora_request=None):
        await asyncio.sleep(0.01 * len(prompt["prompt_token_ids"]))  # requests interleave
        self.served[request_id] = lora_request
        self.salts[request_id] = prompt["cache_salt"]
        yield prompt


class StandInServer:
    """verl's server as far as routing sees it: `run_server` makes the engine, `generate` calls it
    without a LoRA request (verl 0.9.1's does when its own LoRA is off)."""

    async def run_server(self, args):
        self.engine = StandInEngine()

    async def generate(self, prompt_ids, sampling_params, request_id):
        prompt = {"prompt_token_ids": prompt_ids, "multi_modal_data": {}}  # verl's TokensPrompt
        async for _ in self.engine.generate(prompt=prompt, request_id=request_id, lora_request=None):
            pass
        return SimpleNamespace(token_ids=prompt_ids, extra_fields={"global_steps": None})


class Server(AdapterRouting, StandInServer):
    pass


def files(tag: str) -> dict[str, bytes]:
    return {"adapter_config.json": json.dumps({"tag": tag}).encode(), "adapter_model.safetensors": tag.encode()}


async def serving(*adapters: str) -> Server:
    """A started server with each adapter loaded at step 0 (its files tagged by its initial and 0)."""
    server = Server()
    await server.run_server(None)
    for name in adapters:
        await server.load_adapter(name, files(f"{name[0]}0"), 0)
    return server


def test_each_request_is_served_by_its_adapter_at_its_step():
    async def scenario():
        server = await serving("coder", "tester")
        await server.load_adapter("coder", files("c1"), 1)
        outputs = await asyncio.gather(
            *(
                server.generate([1] * n, {}, request_id=f"{name}-{n}", adapter=name)
                for n, name in [(3, "coder"), (1, "tester"), (2, "coder"), (4, "tester")]
            )
        )
        return server, outputs

    server, outputs = asyncio.run(scenario())
    engine = server.engine._engine
    served = {request_id: (request.lora_name, request.lora_int_id) for request_id, request in engine.served.items()}
    assert served == {
        "coder-3": ("coder", 1),
        "tester-1": ("tester", 2),
        "coder-2": ("coder", 1),
        "tester-4": ("tester", 2),
    }
    assert [o.extra_fields["global_steps"] for o in outputs] == [1, 0, 1, 0]
    # loaded in place, the reload under the coder's id; generation requests never reload
    assert [(r.lora_name, r.lora_int_id, r.load_inplace) for r in engine.added] == [
        ("coder", 1, True),
        ("tester", 2, True),
        ("coder", 1, True),
    ]
    assert not any(request.load_inplace for request in engine.served.values())
    assert engine.salts == {"coder-3": "coder@1", "tester-1": "tester@0", "coder-2": "coder@1", "tester-4": "tester@0"}
    coder = Path(server.adapters["coder"].lora_path)
    assert coder.name == "coder-1" and (coder / "adapter_model.safetensors").read_bytes() == b"c1"
    assert not (coder.parent / "coder-0").exists(), "the previous version's files are removed"


def test_a_load_while_requests_run_leaves_them_at_their_arrival_step_and_salts_later_ones_anew():
    async def scenario():
        server = await serving("coder", "tester")
        running = [
            asyncio.create_task(server.generate([1] * 5, {}, request_id=f"{name}-early", adapter=name))
            for name in ("coder", "tester")
        ]
        await asyncio.sleep(0.02)  # both in the engine
        await server.load_adapter("coder", files("c1"), 1)
        in_flight = sum(not task.done() for task in running)  # the load did not wait for them
        later = await server.generate([1], {}, request_id="coder-late", adapter="coder")
        return server, in_flight, await asyncio.gather(*running), later

    server, in_flight, (coder_early, tester_early), later = asyncio.run(scenario())
    engine = server.engine._engine
    assert in_flight == 2
    assert [o.extra_fields["global_steps"] for o in (coder_early, tester_early, later)] == [0, 0, 1]
    assert engine.salts == {"coder-early": "coder@0", "tester-early": "tester@0", "coder-late": "coder@1"}
    assert engine.served["coder-late"].lora_int_id == engine.served["coder-early"].lora_int_id == 1


def test_a_request_for_an_adapter_not_loaded_is_refused_naming_the_loaded_ones():
    async def scenario():
        server = await serving("coder")
        await server.generate([1], {}, request_id="x", adapter="judge")

    with pytest.raises(ValueError, match=r"adapter 'judge' is not loaded; this server serves \['coder'\]"):
        asyncio.run(scenario())


def test_the_client_names_its_adapter_on_every_request():
    class Client:
        async def generate(self, request_id, **kwargs):
            return request_id, kwargs

    request_id, kwargs = asyncio.run(
        AdapterClient(Client(), "tester").generate("r1", prompt_ids=[1], sampling_params={})
    )
    assert (request_id, kwargs) == ("r1", {"adapter": "tester", "prompt_ids": [1], "sampling_params": {}})
