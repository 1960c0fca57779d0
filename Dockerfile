# syntax=docker/dockerfile:1
#
# tm-cache container image.
#
#   docker build -t tm-cache .
#   docker run --rm -p 8080:8080 -p 9090:9090 -e TM_CACHE_UPSTREAM=https://tm.example.com tm-cache
#
# Settings come from flags, TM_CACHE_* environment variables or a YAML file passed with
# `--config` (see config/default.yaml, copied into the image at /app/config/default.yaml).

# Pinned to an exact release so that a rebuild of the same commit gets the same Node and Debian
# base (node:20-bookworm-slim moves with every patch release): 20.20.2 is the Node the tests and
# benchmarks ran on, within the engines range (>=20.18). Bump it deliberately, with a test run.
# A digest (node:20.20.2-bookworm-slim@sha256:...) pins it byte for byte; append one where the
# build can look it up (`docker buildx imagetools inspect node:20.20.2-bookworm-slim`).
ARG NODE_IMAGE=node:20.20.2-bookworm-slim

# ---- build: compile TypeScript with the dev dependencies ----------------------------------
FROM ${NODE_IMAGE} AS build
WORKDIR /app
# Manifests first, so the dependency layer is reused while only sources change.
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
# The status page's browser code is compiled and its files copied into dist/ by this script.
COPY scripts/build-status-page.mjs ./scripts/
COPY src ./src
RUN npm run build

# ---- runtime: production dependencies, compiled code, config reference --------------------
FROM ${NODE_IMAGE} AS runtime
# 0.0.0.0: in a container, listening on loopback only would make both ports unreachable.
ENV NODE_ENV=production \
    TM_CACHE_HOST=0.0.0.0 \
    TM_CACHE_MANAGEMENT_HOST=0.0.0.0
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY config ./config
# The image's `node` user, by number so that Kubernetes' runAsNonRoot can verify it.
# Nothing is written at runtime: the root filesystem may be mounted read-only.
USER 1000:1000
# 8080: the proxy; 9090: management (/healthz, /readyz).
EXPOSE 8080 9090
# `tm-cache healthcheck` reads the settings serve reads (TM_CACHE_CONFIG, TM_CACHE_* variables),
# so it asks /healthz over HTTPS when server.tls is on and on server.managementPort wherever that
# is set; over HTTPS the server must present the certificate of server.tls.certFile. Settings
# given to serve as flags after the image name are not seen here: set those by environment.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "dist/cli.js", "healthcheck"]
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["serve"]
