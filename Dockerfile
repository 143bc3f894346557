# The privbandit image: every party of docker-compose.yml runs from it (`privbandit <command>`).
# Pinned (not a floating tag): a rebuild gets the same interpreter and base packages.
FROM python:3.11.11-slim

# NUMBA_CACHE_DIR: the linear family's compiled kernels cache where the unprivileged user can write
# (site-packages is root's): each container compiles them once, on first use (a few seconds).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    NUMBA_CACHE_DIR=/tmp/numba

# One unprivileged user runs every party. Its uid/gid are build arguments so that the files it
# writes to a bind mount (./results/compose) can be yours on Linux, and so that the broker
# container can run as the same uid and read the 0600 password file (see docs/compose.md).
ARG PRIVBANDIT_UID=10001
ARG PRIVBANDIT_GID=10001
RUN groupadd --non-unique --gid "${PRIVBANDIT_GID}" privbandit \
 && useradd --non-unique --uid "${PRIVBANDIT_UID}" --gid privbandit --home-dir /home/privbandit --create-home \
            --shell /usr/sbin/nologin privbandit

COPY pyproject.toml README.md constraints.txt /tmp/src/
COPY privbandit /tmp/src/privbandit
# Every dependency at the version the tests ran with (constraints.txt), not whatever is newest.
RUN pip install -c /tmp/src/constraints.txt /tmp/src && rm -rf /tmp/src

# Mount points. A named volume mounted on an empty directory of the image takes its owner, so the
# unprivileged user can write /config (broker files), the roles' secrets, the keys, the TLS files
# (/tls, /ca) and the parties' checkpoints (/state, /state-<party>) (a directory the image lacks
# would be created root-owned, and the services could not write it).
RUN mkdir /config /keys /results /experiments /secret /secret-observer /secret-analyzer /secret-aggregator \
          /secret-users /fleet-0 /fleet-1 /fleet-keys /tls /ca /state /state-analyzer /state-aggregator \
          /state-observer \
 && chown privbandit:privbandit /config /keys /results /secret /secret-observer /secret-analyzer \
          /secret-aggregator /secret-users /fleet-0 /fleet-1 /fleet-keys /tls /ca /state /state-analyzer \
          /state-aggregator /state-observer

USER privbandit
WORKDIR /home/privbandit
ENTRYPOINT ["privbandit"]
CMD ["--help"]
