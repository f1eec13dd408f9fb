# Production image: Triton 2.51.0 (NGC 24.10) serving model_repository/ on GPU.
#   docker build -t kyc-triton .
#   docker run --gpus all --shm-size=1g -p 8000-8002:8000-8002 kyc-triton
# The Python backend moves tensors through /dev/shm: Docker's default 64 MB is
# too small for batched images, hence --shm-size (1 GB is ample for the defaults).
ARG TRITON_IMAGE=nvcr.io/nvidia/tritonserver:24.10-py3

# ---- build: the default model files, made by the same `make setup` that CI runs ----
FROM ${TRITON_IMAGE} AS build
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends make python3-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make setup \
    && .venv/bin/kyc repo check model_repository \
    && .venv/bin/python -m pip wheel --no-deps --no-build-isolation -w /dist .

# ---- final: Triton with the project's package and the repository ----
FROM ${TRITON_IMAGE}
COPY locks/runtime-py3.10.lock /tmp/runtime.lock
COPY --from=build /dist/ /tmp/dist/
# The runtime dependencies from the hash lock (the image runs Python 3.10); numpy<2
# is pinned: numpy 2 makes this Python backend answer with empty outputs.
RUN python3 -m pip install --no-cache-dir --require-hashes -r /tmp/runtime.lock \
    && python3 -m pip install --no-cache-dir --no-deps /tmp/dist/*.whl \
    && rm -rf /tmp/dist /tmp/runtime.lock
COPY --from=build --chown=1000:1000 /src/model_repository /models
ENV KYC_TRITON_HOME=/opt/tritonserver
# Production mode: refuses to start without KYC_ADMIN_KEY (>= 16 characters: it
# unlocks the model-repository, shared-memory, trace and logging APIs) and a token key.
ENV KYC_PRODUCTION=1
# uid 1000 is the image's unprivileged triton-server user.
USER 1000:1000
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=15s --timeout=5s --start-period=180s --retries=3 \
    CMD ["kyc", "health", "--url", "127.0.0.1:8000"]
# Liveness tokens are sealed with KYC_TOKEN_KEY (base64 of 32 random bytes) or
# KYC_TOKEN_KEY_FILE (e.g. a mounted secret); every replica needs the same key.
ENTRYPOINT ["kyc", "serve", "--model-repository", "/models", "--triton-home", "/opt/tritonserver", "--production"]
