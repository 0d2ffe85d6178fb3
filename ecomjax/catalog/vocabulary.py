"""The catalog's vocabulary (SPEC §1.3, §1.4, §8.3): the category taxonomy, brand,
adjective and store names, the discrete attribute values, the numeric values the synthetic
catalog draws, and the variant pools.

Only catalog generation and loading, variant synthesis and text rendering read these; the
device stores indices into them. Protocol enums and static shapes stay in
``ecomjax.constants``.
"""

from __future__ import annotations

from ecomjax.constants import Attr

# --- categories, brands, stores (SPEC §1.3, §1.4) ----------------------------------------

# (path, leaf, display name, nouns, policy category)
TAXONOMY: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    (
        "electronics/audio/headphones",
        "headphones",
        "headphones",
        ("Headphones", "Earbuds", "Earphones"),
        "electronics",
    ),
    (
        "electronics/audio/speakers",
        "speakers",
        "speakers",
        ("Speaker", "Soundbar", "Subwoofer"),
        "electronics",
    ),
    (
        "electronics/computing/laptops",
        "laptops",
        "laptops",
        ("Laptop", "Notebook", "Ultrabook"),
        "electronics",
    ),
    (
        "electronics/computing/monitors",
        "monitors",
        "monitors",
        ("Monitor", "Display", "Screen"),
        "electronics",
    ),
    (
        "electronics/computing/keyboards",
        "keyboards",
        "keyboards",
        ("Keyboard", "Keypad"),
        "electronics",
    ),
    (
        "electronics/computing/mice",
        "mice",
        "mice",
        ("Mouse", "Trackball", "Trackpad"),
        "electronics",
    ),
    ("electronics/mobile/phones", "phones", "phones", ("Smartphone", "Phone"), "electronics"),
    ("electronics/mobile/tablets", "tablets", "tablets", ("Tablet", "E-Reader"), "electronics"),
    (
        "electronics/mobile/chargers",
        "chargers",
        "chargers",
        ("Charger", "Power Adapter", "Power Bank"),
        "electronics",
    ),
    (
        "electronics/mobile/cases",
        "cases",
        "phone cases",
        ("Phone Case", "Tablet Cover"),
        "electronics",
    ),
    (
        "electronics/cameras/dslr",
        "dslr",
        "DSLR cameras",
        ("DSLR Camera", "Mirrorless Camera"),
        "electronics",
    ),
    (
        "electronics/cameras/action",
        "action",
        "action cameras",
        ("Action Camera", "Helmet Camera"),
        "electronics",
    ),
    (
        "electronics/gaming/consoles",
        "consoles",
        "game consoles",
        ("Gaming Console", "Game System"),
        "electronics",
    ),
    (
        "electronics/gaming/controllers",
        "controllers",
        "game controllers",
        ("Controller", "Gamepad", "Joystick"),
        "electronics",
    ),
    (
        "electronics/smart_home/lights",
        "lights",
        "smart lights",
        ("Smart Bulb", "LED Strip", "Smart Light"),
        "electronics",
    ),
    (
        "electronics/smart_home/plugs",
        "plugs",
        "smart plugs",
        ("Smart Plug", "Smart Switch"),
        "electronics",
    ),
    (
        "home/kitchen/appliances",
        "appliances",
        "kitchen appliances",
        ("Blender", "Toaster", "Coffee Maker", "Air Fryer"),
        "appliances",
    ),
    ("home/kitchen/cookware", "cookware", "cookware", ("Pan", "Pot Set", "Skillet", "Wok"), "home"),
    (
        "home/kitchen/utensils",
        "utensils",
        "kitchen utensils",
        ("Knife Set", "Spatula Set", "Cutting Board"),
        "home",
    ),
    (
        "home/furniture/desks",
        "desks",
        "desks",
        ("Standing Desk", "Computer Desk", "Writing Desk"),
        "furniture",
    ),
    (
        "home/furniture/chairs",
        "chairs",
        "chairs",
        ("Office Chair", "Ergonomic Chair", "Bar Stool"),
        "furniture",
    ),
    (
        "home/furniture/shelves",
        "shelves",
        "shelves",
        ("Bookshelf", "Wall Shelf", "Storage Rack"),
        "furniture",
    ),
    (
        "home/decor/lighting",
        "lighting",
        "lamps",
        ("Floor Lamp", "Table Lamp", "Pendant Light"),
        "home",
    ),
    ("home/decor/rugs", "rugs", "rugs", ("Area Rug", "Runner", "Mat"), "home"),
    (
        "clothing/mens/shirts",
        "shirts",
        "men's shirts",
        ("T-Shirt", "Dress Shirt", "Polo Shirt"),
        "clothing",
    ),
    ("clothing/mens/pants", "pants", "men's pants", ("Jeans", "Chinos", "Joggers"), "clothing"),
    (
        "clothing/womens/dresses",
        "dresses",
        "dresses",
        ("Maxi Dress", "Cocktail Dress", "Sundress"),
        "clothing",
    ),
    ("clothing/womens/tops", "tops", "women's tops", ("Blouse", "Tank Top", "Sweater"), "clothing"),
    (
        "clothing/shoes/sneakers",
        "sneakers",
        "sneakers",
        ("Running Shoes", "Sneakers", "Training Shoes"),
        "clothing",
    ),
    (
        "clothing/shoes/boots",
        "boots",
        "boots",
        ("Hiking Boots", "Ankle Boots", "Work Boots"),
        "clothing",
    ),
    (
        "sports/fitness/weights",
        "weights",
        "weights",
        ("Dumbbell Set", "Kettlebell", "Weight Bench"),
        "sports",
    ),
    (
        "sports/fitness/yoga",
        "yoga",
        "yoga gear",
        ("Yoga Mat", "Yoga Blocks", "Resistance Bands"),
        "sports",
    ),
    (
        "sports/outdoor/camping",
        "camping",
        "camping gear",
        ("Tent", "Sleeping Bag", "Camp Stove"),
        "sports",
    ),
    (
        "sports/outdoor/hiking",
        "hiking",
        "hiking gear",
        ("Backpack", "Trekking Poles", "Water Bottle"),
        "sports",
    ),
    (
        "beauty/skincare/moisturizers",
        "moisturizers",
        "moisturizers",
        ("Face Cream", "Moisturizer", "Serum"),
        "beauty",
    ),
    (
        "beauty/skincare/sunscreen",
        "sunscreen",
        "sunscreen",
        ("Sunscreen", "Sun Block", "UV Lotion"),
        "beauty",
    ),
    (
        "beauty/hair/shampoo",
        "shampoo",
        "shampoo",
        ("Shampoo", "Conditioner", "Hair Wash"),
        "beauty",
    ),
    (
        "beauty/hair/styling",
        "styling",
        "hair styling tools",
        ("Hair Dryer", "Flat Iron", "Curling Wand"),
        "beauty",
    ),
    (
        "toys/educational/stem",
        "stem",
        "STEM toys",
        ("Robot Kit", "Chemistry Set", "Telescope"),
        "toys",
    ),
    ("toys/games/board", "board", "board games", ("Board Game", "Card Game", "Puzzle"), "toys"),
)

BRANDS: tuple[str, ...] = (
    "TechPro",
    "NovaStar",
    "EcoVibe",
    "UrbanEdge",
    "PrimeFit",
    "LuxeHome",
    "SwiftGear",
    "PureBlend",
    "SonicWave",
    "BrightPath",
    "ZenCraft",
    "FusionLab",
    "CoreMax",
    "StellarByte",
    "GreenLeaf",
    "IronClad",
    "CloudNine",
    "BluePeak",
    "FireForge",
    "AquaPure",
    "PixelVault",
    "ThunderBolt",
    "CrystalClear",
    "WildTrail",
    "SilkWay",
)

ADJECTIVES: tuple[str, ...] = (
    "Premium",
    "Ultra",
    "Professional",
    "Compact",
    "Wireless",
    "Smart",
    "Advanced",
    "Portable",
    "Heavy-Duty",
    "Lightweight",
    "Ergonomic",
    "High-Performance",
    "All-in-One",
    "Multi-Purpose",
    "Eco-Friendly",
    "Classic",
    "Modern",
    "Industrial",
    "Deluxe",
    "Essential",
)

STORES: tuple[str, ...] = (
    "TechWorld",
    "HomeGoods Plus",
    "FashionHub",
    "SportZone",
    "BeautyBar",
    "GadgetGalaxy",
    "FitLife Store",
    "KidsToys Central",
    "OutdoorExperts",
    "ChefSupply",
    "GamerDen",
    "EcoMart",
    "LuxeFinds",
    "DailyDeals",
)

DENIED_CATEGORY_PARTS: frozenset[str] = frozenset(
    {
        "weapons",
        "firearms",
        "ammunition",
        "explosives",
        "adult_explicit",
        "controlled_substances",
        "tobacco",
        "counterfeit_goods",
        "surveillance_equipment",
        "hazardous_materials",
    }
)

# Variant-synthesis groups (SPEC §8.3) keyed by the path's first segment.
GROUPS: tuple[str, ...] = ("electronics", "home", "clothing", "sports", "beauty", "toys")

# --- attribute values (SPEC §1.2, §1.4) --------------------------------------------------

# Discrete vocabularies: the catalog values first, then extra values that only variant
# pools use (SPEC §8.3), so one code space serves products and synthesized variants.
VOCAB: dict[Attr, tuple[str, ...]] = {
    Attr.COLOR: (
        "black",
        "white",
        "silver",
        "gray",
        "red",
        "blue",
        "green",
        "yellow",
        "orange",
        "purple",
        "pink",
        "brown",
        "gold",
        "navy",
        "teal",
        "beige",
        "multicolor",
    ),
    Attr.SIZE: ("XS", "S", "M", "L", "XL", "XXL"),
    Attr.MATERIAL: (
        "cotton",
        "polyester",
        "leather",
        "metal",
        "plastic",
        "wood",
        "glass",
        "ceramic",
        "rubber",
        "silicone",
        "nylon",
        "stainless_steel",
        "aluminum",
        "carbon_fiber",
    ),
    Attr.CONNECTOR_TYPE: (
        "USB-A",
        "USB-C",
        "Lightning",
        "Micro-USB",
        "HDMI",
        "DisplayPort",
        "3.5mm",
        "Thunderbolt",
        "Bluetooth",
        "Wi-Fi",
    ),
    Attr.ITEM_FORM: ("cream", "gel", "spray", "powder", "liquid", "serum", "foam", "stick"),
    Attr.SKIN_TYPE: ("oily", "dry", "sensitive", "combination", "all", "normal"),
    Attr.FINISH_TYPE: ("matte", "glossy", "satin", "natural", "metallic"),
    Attr.AGE_RANGE: ("0-2", "3-5", "6-8", "9-12", "13+", "adult"),
}

# How many leading vocabulary entries the synthetic catalog draws from (SPEC §1.4).
CATALOG_VOCAB_SIZE: dict[Attr, int] = {
    Attr.COLOR: 17,
    Attr.SIZE: 6,
    Attr.MATERIAL: 14,
    Attr.CONNECTOR_TYPE: 10,
    Attr.ITEM_FORM: 6,
    Attr.SKIN_TYPE: 5,
    Attr.FINISH_TYPE: 0,
    Attr.AGE_RANGE: 0,
}

WATTAGE_VALUES: tuple[float, ...] = (5, 10, 18, 20, 30, 45, 60, 65, 100)
SCREEN_VALUES: tuple[float, ...] = (13.3, 14, 15.6, 17.3, 21.5, 24, 27, 32, 34, 43)

# --- variant pools (SPEC §8.3) -----------------------------------------------------------

# Variant pools (SPEC §8.3), as values: discrete ones are vocabulary codes.
VARIANT_POOL_TEXT: dict[Attr, tuple] = {
    Attr.WATTAGE: (5, 10, 15, 20, 30, 45, 65, 100, 140, 200),
    Attr.WEIGHT_LBS: (0.25, 0.5, 1, 2, 5, 10, 20),
    Attr.SCREEN_SIZE_INCHES: (5.5, 6.1, 11, 13.3, 14, 15.6, 17.3, 24, 27),
    Attr.COLOR: ("black", "white", "silver", "red", "blue", "green", "navy", "gold"),
    Attr.SIZE: ("XS", "S", "M", "L", "XL", "XXL"),
    Attr.MATERIAL: (
        "cotton",
        "polyester",
        "leather",
        "metal",
        "plastic",
        "wood",
        "nylon",
        "silicone",
    ),
    Attr.CONNECTOR_TYPE: (
        "USB-A",
        "USB-C",
        "Lightning",
        "Micro-USB",
        "HDMI",
        "Thunderbolt",
        "3.5mm",
    ),
    Attr.ITEM_FORM: ("cream", "gel", "spray", "powder", "liquid", "foam", "stick"),
    Attr.SKIN_TYPE: ("oily", "dry", "sensitive", "combination", "normal"),
    Attr.FINISH_TYPE: ("matte", "glossy", "satin", "natural", "metallic"),
}

VARIANT_POOL_MAX = max(len(v) for v in VARIANT_POOL_TEXT.values())
