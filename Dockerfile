# The image `cuberay kube render` puts in every pod by default (cuberay:<version>): Ray's official
# image of the Ray version cuberay pins, with cuberay installed. KubeRay starts Ray in it; the head
# also runs the cuberay controller and job drivers, so every pod needs the same code.
#
#   docker build -t cuberay:0.1.0 .
#   cuberay kube render --platform configs/platform.yaml --out manifests/          # uses cuberay:0.1.0
#   cuberay kube render --platform configs/platform.yaml --image REGISTRY/cuberay:0.1.0 --out manifests/
#
# The -gpu base carries CUDA, so GPU worker pods run PyTorch on their cards; CPU pods use it too.
ARG RAY_VERSION=2.60.0
ARG PYTHON_TAG=py311
FROM rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-gpu

ARG RAY_VERSION
LABEL org.opencontainers.image.title="cuberay" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.description="Ray-native multi-tenant compute platform, on Ray's official image"

WORKDIR /home/ray/cuberay
COPY --chown=ray:users pyproject.toml README.md ./
COPY --chown=ray:users cuberay ./cuberay
# Keep the image's Ray: the pin below is the one pyproject.toml has, so pip leaves it as it is.
RUN pip install --no-cache-dir "ray[default,tune,serve,train]==${RAY_VERSION}" . \
    && cuberay --help > /dev/null
