# The same image `make image` builds without a daemon: static gpuscaler and
# gpuscaler-karpenter, non-root (uid 65532), with CA roots.
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=v1.2.3 -t gpuscaler .
FROM golang:1.26 AS build
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH=amd64
WORKDIR /src
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o /out/gpuscaler ./cmd/gpuscaler
RUN cd cmd/gpuscaler-karpenter && CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH GOTOOLCHAIN=go1.27.3 go build -trimpath -ldflags "-s -w" -o /out/gpuscaler-karpenter .
RUN mkdir -p /rootfs/etc/ssl/certs /rootfs/tmp /rootfs/home/nonroot /rootfs/usr/local/bin \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' > /rootfs/etc/group \
 && chmod 1777 /rootfs/tmp && chown 65532:65532 /rootfs/home/nonroot \
 && cp /out/gpuscaler /out/gpuscaler-karpenter /rootfs/usr/local/bin/

FROM scratch
ARG VERSION=dev
COPY --from=build /rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt HOME=/home/nonroot
USER 65532:65532
WORKDIR /home/nonroot
LABEL org.opencontainers.image.title="gpuscaler" \
      org.opencontainers.image.description="Autoscale Kubernetes GPU nodes on GPU clouds" \
      org.opencontainers.image.source="https://github.com/gpuscaler/gpuscaler" \
      org.opencontainers.image.version="$VERSION"
ENTRYPOINT ["/usr/local/bin/gpuscaler"]
