FROM python:3.11-slim

# On PyPI, torch for linux/x86_64 is the CUDA build: the image runs on GPU nodes as is.
ARG TORCH_SPEC="torch==2.13.0"
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

WORKDIR /app
# The sandbox of bundled code: bubblewrap, libseccomp for its system call filter, and
# nftables for the egress filter of multi-node ranks and pip (workers/egress.py).
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap libseccomp2 nftables \
    && rm -rf /var/lib/apt/lists/*
RUN pip install "${TORCH_SPEC}"
COPY pyproject.toml README.md ./
COPY ampfleet ./ampfleet
# One image for every role (compose runs api, scheduler, worker and migrate from it).
RUN pip install ".[all]" \
    && useradd --create-home --uid 10001 ampfleet \
    && mkdir -p /var/lib/ampfleet && chown ampfleet /var/lib/ampfleet

# The API and the scheduler run as this user; the worker service runs as root (compose sets
# it), which it needs for namespaces, cgroups and the unprivileged uids ranks run as.
USER ampfleet
ENV AMPFLEET_DATA_DIR=/var/lib/ampfleet
EXPOSE 8000
ENTRYPOINT ["ampfleet"]
CMD ["up"]
