"""Rule probes of the carrental example world (see envs/probes.py): for every compiled rule
a call that must be rejected with exactly its rule id and a call one step away that passes."""

from data.records import ToolCall

FIXTURE = """
INSERT INTO meta VALUES ('now', '2026-05-10 09:00:00');
INSERT INTO customers VALUES ('cu_a', 'Ada', '2026-05-15'), ('cu_b', 'Ben', '2027-01-01'),
                             ('cu_c', 'Cai', '2027-01-01');
INSERT INTO cars VALUES ('car_1', 'VW Golf', 48, 'available'), ('car_2', 'Fiat Panda', 35, 'maintenance'),
                        ('car_3', 'Toyota Corolla', 52, 'available');
INSERT INTO rentals VALUES ('RN0001', 'cu_c', 'car_3', '2026-05-09', 12, 624, 'active');
INSERT INTO rentals VALUES ('RN0002', 'cu_b', 'car_1', '2026-05-01', 2, 96, 'active');
UPDATE rentals SET status = 'returned' WHERE rental_id = 'RN0002';
"""


def rent(customer: str, car: str, days: int) -> ToolCall:
    return ToolCall(name="rent_car", arguments={"customer_id": customer, "car_id": car, "days": days})


def extend(rental: str, extra: int) -> ToolCall:
    return ToolCall(name="extend_rental", arguments={"rental_id": rental, "extra_days": extra})


PROBES = {
    "R01_CAR_AVAILABLE": (rent("cu_b", "car_2", 3), rent("cu_b", "car_1", 3)),
    "R02_LICENSE_VALID": (rent("cu_a", "car_1", 6), rent("cu_a", "car_1", 5)),  # expires in 5 days
    "R03_MAX_DAYS": (extend("RN0001", 3), extend("RN0001", 2)),  # 12 days held, 14 allowed
    "R04_ONE_ACTIVE": (rent("cu_c", "car_1", 1), rent("cu_b", "car_1", 1)),
    "R05_CLOSED_FINAL": (ToolCall(name="return_car", arguments={"rental_id": "RN0002"}),
                         ToolCall(name="return_car", arguments={"rental_id": "RN0001"})),
}
