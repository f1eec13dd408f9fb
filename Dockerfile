# Production image: Triton 2.51.0 (NGC 24.10) serving model_repository/ on GPU.
#   make image       (make wheelhouse, then docker build --network none -t kyc-triton:latest .)
#   docker run --gpus all --shm-size=2g -p 8000-8002:8000-8002 -e KYC_ADMIN_KEY=... \
#       -e KYC_TOKEN_KEY=... -e KYC_CLIENT_KEY=... kyc-triton
# The Python backend moves tensors through /dev/shm: Docker's default 64 MB is
# too small for batched images, hence --shm-size (each stub's region is created at
# 64 MiB, kyc_tools.operator.server: 16 models and a version switch fit in 2 GB).
#
# The build reaches no network: everything it installs was fetched and checked on the
# host by `make wheelhouse` (build/wheelhouse: the hash-locked wheels, the pinned weight
# archives, the .debs the base lacks). `make image-cpu` builds this same file on the CPU
# stand-in base (--build-arg TRITON_IMAGE=kyc-triton-base:cpu); docs/image.md.
ARG TRITON_IMAGE=nvcr.io/nvidia/tritonserver:24.10-py3

# ---- build: the default model files, made by the same `make setup` that CI runs ----
FROM ${TRITON_IMAGE} AS build
WORKDIR /src
COPY build/wheelhouse/ build/wheelhouse/
# pip, `kyc models fetch` and system-deps.sh take everything from there; TLS stays on.
ENV PIP_NO_INDEX=1 \
    PIP_FIND_LINKS=/src/build/wheelhouse/wheels \
    KYC_CACHE_DIR=/src/build/wheelhouse/weights \
    KYC_DEBS_DIR=/src/build/wheelhouse/debs
# The locked dependencies first, in layers that a change to the project's code leaves
# cached: the development environment `make setup` needs, and the image's own (/opt/kyc).
COPY Makefile pyproject.toml constraints.txt ./
COPY locks/ locks/
COPY scripts/system-deps.sh scripts/
RUN bash scripts/system-deps.sh \
    && make deps-locked RUNTIME=/opt/kyc
# Then the project: the model files, checked, and the package into /opt/kyc.
COPY README.md ./
COPY client/ client/
COPY backends/ backends/
COPY tools/ tools/
COPY export/ export/
COPY model_repository/ model_repository/
RUN make setup \
    && .venv/bin/kyc repo check model_repository \
    && make runtime RUNTIME=/opt/kyc \
    && chmod -R u=rwX,go=rX model_repository

# ---- final: Triton with the project's environment and the repository ----
FROM ${TRITON_IMAGE}
# A virtual environment from locks/runtime-py<the base's Python>.lock (--require-hashes)
# and the project's wheel; numpy<2 is pinned there: numpy 2 makes this Python backend
# answer with empty outputs. `kyc serve` puts its bin first on the server's PATH, so the
# Python stubs run in it.
COPY --from=build /opt/kyc /opt/kyc
# /models and its files stay root's and read-only to the serving user: a process that
# serves cannot rewrite the models. The watcher's live copy, which Triton reads, goes
# to the temp folder (/tmp; --live-dir), and a mounted volume over /models brings its
# own owner (deploy/).
COPY --from=build /src/model_repository /models
ENV PATH=/opt/kyc/bin:${PATH} \
    KYC_TRITON_HOME=/opt/tritonserver
# Production mode: refuses to start without KYC_ADMIN_KEY (>= 16 characters: it
# unlocks the model-repository, shared-memory, trace and logging APIs), a token key and
# KYC_CLIENT_KEY (every inference call carries it; `--open-inference` after the image
# name lets every caller infer instead).
ENV KYC_PRODUCTION=1
# uid 1000 is the image's unprivileged triton-server user.
USER 1000:1000
# 8003: the repository watcher's /metrics and /status (`kyc repo status`). Versions
# dropped into /models (a mounted volume) are served once complete and checked.
EXPOSE 8000 8001 8002 8003
# kyc health asks the server this container started (its HTTP port, whatever the options).
HEALTHCHECK --interval=15s --timeout=5s --start-period=180s --retries=3 \
    CMD ["kyc", "health"]
# Liveness tokens are sealed with KYC_TOKEN_KEY (base64 of 32 random bytes) or
# KYC_TOKEN_KEY_FILE (e.g. a mounted secret); every replica needs the same key.
# Options after the image name are appended: `docker run ... kyc-triton --http-port 9000`.
# --host 0.0.0.0: kyc serve listens on loopback only unless told, and a container is
# reached through its other interfaces.
# On SIGTERM it first drains (requests in flight, open liveness sessions) for up to 5 s,
# inside `docker stop`'s default 10 s; Kubernetes appends --drain-secs 60 (deploy/).
ENTRYPOINT ["kyc", "serve", "--model-repository", "/models", "--triton-home", "/opt/tritonserver", "--host", "0.0.0.0", "--production", "--drain-secs", "5"]
