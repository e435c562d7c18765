# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection arguments the module unit tests share (kept out of conftest.py: several conftests exist)."""

HOST = "https://10.0.0.10:6443"
ENDPOINTS = ["https://10.0.0.11:6443", "https://10.0.0.12:6443", "https://10.0.0.13:6443"]
BASE_ARGS = {"host": HOST, "api_key": "secret-token", "validate_certs": False, "endpoints": ENDPOINTS}
