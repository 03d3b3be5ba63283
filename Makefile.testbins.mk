# testbins: build (first run) or find (later runs) etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok for the test suite. They
# live in a cache folder outside the work tree; `go run ./hack/testbins`
# prints it, and the test target passes it on as GPUSCALER_TESTBINS.
.PHONY: testbins
testbins:
	@$(GO) run ./hack/testbins >/dev/null
