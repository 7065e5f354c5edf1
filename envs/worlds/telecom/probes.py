"""Rule probes of the telecom world: for every compiled rule a call that must be rejected with
exactly that rule id and a call one step away that must pass, on a small fixture state
(`envs.probes` runs them; the world's tests and `bench/synthesis_yield.py` use them)."""

from __future__ import annotations

from data.records import ToolCall

FIXTURE = """
INSERT INTO meta VALUES ('now', '2026-05-10 12:00:00');
INSERT INTO plans VALUES
 ('pl_lite', 'Lite 2', 12, 2, 0, 0, 'available'), ('pl_basic', 'Basic 5', 20, 5, 0, 0, 'available'),
 ('pl_plus', 'Plus 15', 35, 15, 0, 12, 'available'), ('pl_world', 'World 30', 60, 30, 1, 12, 'available'),
 ('pl_old', 'Classic 10', 28, 10, 0, 12, 'available');
INSERT INTO addons VALUES
 ('ad_d5', 'Data Boost 5 GB', 'data', 10, 5), ('ad_d10', 'Data Boost 10 GB', 'data', 15, 10),
 ('ad_eu', 'Roam Europe Pass', 'roaming', 12, 0), ('ad_call', 'International Calling', 'calls', 8, 0),
 ('ad_prot', 'Device Protection', 'insurance', 9, 0);
INSERT INTO customers VALUES
 ('c1', 'Cora One', 'c1@example.com', 'consumer', '2020-01-01'),
 ('c2', 'Cid Two', 'c2@example.com', 'consumer', '2021-01-01'),
 ('c3', 'Cy Three', 'c3@example.com', 'consumer', '2022-01-01');
INSERT INTO payment_methods VALUES
 ('m1', 'c1', 'card', '1111', '2026-05'), ('m1x', 'c1', 'card', '9999', '2026-04'),
 ('m1b', 'c1', 'bank_account', '2222', NULL), ('m2', 'c2', 'card', '3333', '2027-01');
INSERT INTO lines VALUES
 ('L1', 'c1', '555-000-0001', 'pl_plus', 'active', NULL, 0, 0, 100, '2026-05-11', '2025-05-11 10:00:00'),
 ('L2', 'c1', '555-000-0002', 'pl_plus', 'active', NULL, 0, 0, 100, '2026-05-10', '2025-05-10 10:00:00'),
 ('L3', 'c1', '555-000-0003', 'pl_plus', 'active', NULL, 0, 0, 5021, NULL, '2024-01-01 10:00:00'),
 ('L4', 'c1', '555-000-0004', 'pl_plus', 'active', NULL, 0, 0, 5120, NULL, '2024-01-01 10:00:00'),
 ('L5', 'c2', '555-000-0005', 'pl_basic', 'active', NULL, 0, 0, 0, NULL, '2024-01-01 10:00:00'),
 ('L6', 'c2', '555-000-0006', 'pl_basic', 'suspended', 'non_payment', 0, 0, 0, NULL, '2024-01-01 10:00:00'),
 ('L7', 'c3', '555-000-0007', 'pl_basic', 'suspended', 'travel', 1, 0, 0, NULL, '2024-01-01 10:00:00'),
 ('L8', 'c3', '555-000-0008', 'pl_basic', 'active', NULL, 2, 0, 0, NULL, '2024-01-01 10:00:00'),
 ('L9', 'c3', '555-000-0009', 'pl_basic', 'active', NULL, 1, 0, 0, NULL, '2024-01-01 10:00:00'),
 ('L10', 'c3', '555-000-0010', 'pl_basic', 'terminated', NULL, 0, 0, 0, NULL, '2023-01-01 10:00:00');
INSERT INTO line_addons VALUES
 ('L1', 'ad_prot', '2025-06-01 10:00:00'),
 ('L2', 'ad_d5', '2025-06-01 10:00:00'), ('L2', 'ad_call', '2025-06-01 10:00:00'),
 ('L2', 'ad_prot', '2025-06-01 10:00:00'),
 ('L3', 'ad_call', '2025-06-01 10:00:00'), ('L3', 'ad_prot', '2025-06-01 10:00:00'),
 ('L8', 'ad_eu', '2025-06-01 10:00:00');
INSERT INTO usage_records VALUES ('L3', '2026-05-03', 100);
INSERT INTO bills VALUES
 ('B1', 'c1', '2026-05', 'monthly', 50, 0, '2026-05-25', 'open'),
 ('B2', 'c2', '2026-04', 'monthly', 40, 0, '2026-05-05', 'open'),
 ('B3', 'c2', '2026-05', 'monthly', 30, 0, '2026-05-25', 'open');
INSERT INTO payments VALUES ('P1', 'B1', 'm1b', 20, '2026-05-02 09:00:00');
UPDATE plans SET status = 'retired' WHERE plan_id = 'pl_old';
"""


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(name=name, arguments=args)


def pay(bill: str, method: str, amount: int) -> ToolCall:
    return call("pay_bill", bill_id=bill, method_id=method, amount=amount)


# rule id -> (violating probe, valid probe one step away)
PROBES = {
    "R01_PLAN_AVAILABLE": (call("change_plan", line_id="L4", plan_id="pl_old"),
                           call("change_plan", line_id="L4", plan_id="pl_world")),
    "R02_LINE_LIMIT": (call("add_line", customer_id="c1", plan_id="pl_basic"),  # 4 of 4 lines
                       call("add_line", customer_id="c3", plan_id="pl_basic")),  # 3 of 4 (+1 terminated)
    "R03_OVERDUE_BALANCE": (call("add_addon", line_id="L5", addon_id="ad_d5"),
                            call("add_addon", line_id="L4", addon_id="ad_d5")),
    "R04_PAYMENT_AMOUNT": (pay("B1", "m1b", 31), pay("B1", "m1b", 30)),  # 30 still owed
    "R05_METHOD_OWNER": (pay("B1", "m2", 10), pay("B1", "m1b", 10)),
    "R06_CARD_EXPIRED": (pay("B1", "m1x", 10), pay("B1", "m1", 10)),  # expired 2026-04 / expires 2026-05
    "R07_LINE_SUSPENDED": (call("add_addon", line_id="L7", addon_id="ad_call"),
                           call("add_addon", line_id="L8", addon_id="ad_call")),
    "R08_SUSPENSION_LIMIT": (call("suspend_line", line_id="L8", reason="travel"),  # 2 this year
                             call("suspend_line", line_id="L9", reason="travel")),  # 1 this year
    "R09_ROAMING_PASS": (call("set_roaming", line_id="L9", enabled=True),
                         call("set_roaming", line_id="L8", enabled=True)),
    "R10_ADDON_LIMIT": (call("add_addon", line_id="L2", addon_id="ad_eu"),  # 3 add-ons
                        call("add_addon", line_id="L3", addon_id="ad_eu")),  # 2 add-ons
    "R11_CONTRACT_DOWNGRADE": (call("change_plan", line_id="L1", plan_id="pl_basic"),  # ends tomorrow
                               call("change_plan", line_id="L2", plan_id="pl_basic")),  # ends today
    "R12_DATA_USAGE": (call("change_plan", line_id="L3", plan_id="pl_basic"),  # 5121 MB used of 5120
                       call("change_plan", line_id="L4", plan_id="pl_basic")),  # 5120 MB used of 5120
    "R13_TERMINATED_FINAL": (call("resume_line", line_id="L10"), call("resume_line", line_id="L7")),
}
