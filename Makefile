# Shortcuts; the scripts are the source of truth (see README.md).
.PHONY: setup demo test lint sanity docs
setup:
	./scripts/setup.sh
demo:
	./scripts/demo.sh
test:
	./scripts/test.sh
lint:
	./scripts/test.sh lint ansible-lint
sanity:
	./scripts/test.sh sanity
docs:
	./scripts/test.sh docs
