# Run reports (issue 18): the report tests render report.html in headless Chromium from
# Debian's packages. `make chromium` installs it once (a no-op when present).

.PHONY: chromium
chromium:
	@command -v chromium >/dev/null || { \
	  echo "report: installing Debian's chromium (headless browser for the report tests)"; \
	  if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo="sudo -n"; fi; \
	  $$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends chromium \
	  || { echo "report: ERROR: cannot install chromium; run: apt-get install chromium" >&2; exit 1; }; \
	}

TEST_DEPS += chromium
