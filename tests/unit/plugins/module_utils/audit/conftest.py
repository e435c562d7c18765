# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test ids that do not depend on random bytes (encrypted values use fresh IVs), so that parallel
workers collect the same tests."""


def pytest_make_parametrize_id(config, val, argname):
    if isinstance(val, (bytes, bytearray)):
        return f"{argname}-{len(val)}b"
    return None
